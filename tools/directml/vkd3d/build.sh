#!/usr/bin/env bash
# Builds d3d12.dll, libvkd3d-1.dll and libvkd3d-shader-1.dll (with mingw-w64's libgcc_s_seh-1.dll, which they link)
# into WORK_DIR/out, from vkd3d-1.12.tar.gz (the vkd3d-1.12 tag, commit db51675aad3bc48ecce94881c728149d1c699dc4;
# LGPL-2.1, COPYING beside it) with vkd3d-1.12-directml.patch and luid.c. setup.sh runs it and installs the DLLs;
# the Debian packages it needs are setup.sh's. Usage: build.sh WORK_DIR
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$1
mkdir -p "$WORK/out" && cd "$WORK"
tar -xzf "$HERE/vkd3d-1.12.tar.gz"
(cd vkd3d-1.12 && patch -s -p1 < "$HERE/vkd3d-1.12-directml.patch")
# vkd3d's configure looks for the Vulkan and SPIR-V headers beside the mingw ones: point it at Debian's
mkdir -p xinc && ln -sfn /usr/include/vulkan xinc/vulkan && ln -sfn /usr/include/vk_video xinc/vk_video \
    && ln -sfn /usr/include/spirv xinc/spirv
(cd vkd3d-1.12 && autoreconf -if >/dev/null 2>&1)
mkdir -p vkd3d-1.12/build-w64
cd vkd3d-1.12/build-w64
../configure -q --host=x86_64-w64-mingw32 --disable-tests --disable-demos --without-ncurses --without-opengl \
    --without-xcb CPPFLAGS=-I"$WORK/xinc" SONAME_LIBVULKAN=vulkan-1.dll WIDL=/usr/bin/widl CFLAGS="-O2 -g0" >/dev/null
# libvkd3d-utils-1.dll's own link fails (it wants a Windows libvulkan): that one is linked below, as d3d12.dll,
# with luid.c; everything it needs is built by then
make -k -j"$(nproc)" >make.log 2>&1 || true
cd "$WORK"
B=vkd3d-1.12/build-w64
for lib in libvkd3d-1.dll libvkd3d-shader-1.dll; do
    [ -f "$B/.libs/$lib" ] || { echo "build.sh: $lib was not built; see $WORK/$B/make.log" >&2; exit 1; }
done
x86_64-w64-mingw32-gcc -O2 -c -o luid.o "$HERE/luid.c"
x86_64-w64-mingw32-gcc -shared -o out/d3d12.dll $B/libs/vkd3d-utils/.libs/libvkd3d_utils_la-vkd3d_utils_main.o \
    $B/libs/vkd3d-utils/.libs/libvkd3d_utils_la-reflection.o luid.o -L$B/.libs -lvkd3d -lvkd3d-shader \
    $B/.libs/libvkd3d-common.a -ldxgi -ldxguid -luuid
cp $B/.libs/libvkd3d-1.dll $B/.libs/libvkd3d-shader-1.dll out/
cp /usr/lib/gcc/x86_64-w64-mingw32/*-win32/libgcc_s_seh-1.dll out/
echo "$WORK/out"
