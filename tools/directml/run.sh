#!/usr/bin/env bash
# Runs a Windows program against DirectML, as setup.sh installed it:
#
#   tools/directml/run.sh PROGRAM.exe [ARGS...]      exit status: the program's
#
# Links DirectML.dll, d3d12.dll and the vkd3d DLLs of $DIRECTML_WINE/bin beside the program where they are missing
# (Wine looks for a program's DLLs in its folder first), starts an Xvfb of its own unless DISPLAY is set, and stops
# it afterwards. DIRECTML_FP16=1 has the device report FLOAT16 (reading it is then exact; writing it rounds toward
# zero on lavapipe, so FLOAT16 outputs are never compared bit for bit). DIRECTML_WINEDBG=1 keeps Wine's debugger,
# which otherwise is off, so that a crashing program exits at once instead of waiting in it.
set -u
H=${DIRECTML_WINE:-$HOME/.cache/dmlbridge-directml}
[ -f "$H/bin/DirectML.dll" ] || { echo "run.sh: no DirectML in $H: run tools/directml/setup.sh first" >&2; exit 125; }
[ $# -ge 1 ] || { echo "usage: run.sh PROGRAM.exe [ARGS...]" >&2; exit 125; }
export WINEPREFIX="$H/prefix" WINEARCH=win64 WINEDEBUG=${WINEDEBUG:--all} VKD3D_DEBUG=${VKD3D_DEBUG:-none}
overrides="d3d12=n"   # vkd3d 1.12's d3d12.dll, not Wine's own
[ "${DIRECTML_WINEDBG:-0}" = 1 ] || overrides="$overrides;winedbg.exe=d"
export WINEDLLOVERRIDES="$overrides"
export VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json   # lavapipe, Mesa's Vulkan on the CPU
[ "${DIRECTML_FP16:-0}" = 1 ] && export DMLWINE_FORCE_TYPED_UAV_LOADS=1
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$H/xdg}
mkdir -p "$XDG_RUNTIME_DIR" && chmod 700 "$XDG_RUNTIME_DIR"
dir=$(cd "$(dirname "$1")" && pwd) || exit 125
for f in "$H"/bin/*.dll; do
    [ -e "$dir/$(basename "$f")" ] || ln -s "$f" "$dir/$(basename "$f")"
done
xvfb=
if [ -z "${DISPLAY:-}" ]; then
    fifo=$(mktemp -u) && mkfifo "$fifo"
    Xvfb -displayfd 3 -screen 0 640x480x24 -nolisten tcp 3>"$fifo" >/dev/null 2>&1 &
    xvfb=$!
    read -r -t 20 display <"$fifo" || { echo "run.sh: Xvfb did not start" >&2; kill "$xvfb"; rm -f "$fifo"; exit 125; }
    rm -f "$fifo"
    export DISPLAY=:$display
fi
# Wine 8.0 hands a program whose standard output or error is a regular file a handle Python cannot start with
# ("init_sys_streams: ... Invalid handle"): such output goes to its file through a pipe
if [ -f "/proc/$$/fd/1" ] || [ -f "/proc/$$/fd/2" ]; then
    { /usr/lib/wine/wine64 "$@" 2>&1 1>&3 3>&- | cat >&2; exit "${PIPESTATUS[0]}"; } 3>&1 | cat
    rc=${PIPESTATUS[0]}
else
    /usr/lib/wine/wine64 "$@"
    rc=$?
fi
if [ -n "$xvfb" ]; then
    /usr/lib/wine/wineserver -w 2>/dev/null
    kill "$xvfb" 2>/dev/null
    wait "$xvfb" 2>/dev/null
fi
exit $rc
