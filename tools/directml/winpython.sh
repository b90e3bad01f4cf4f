#!/usr/bin/env bash
# Windows' own CPython (python.org's embeddable 3.12.9 for amd64) under the DirectML Wine of setup.sh:
#
#   tools/directml/winpython.sh --run [PYTHON ARGS...]     run python.exe (exit status: Python's)
#   tools/directml/winpython.sh --pip [PIP ARGS...]        install packages for it: win_amd64 wheels, or this
#                                                          project with --no-deps (e.g. --pip --no-deps .)
#
# Installs the interpreter and windows-requirements.txt first (setup.sh --windows-python) when they are missing.
# The embeddable build ignores PYTHONPATH and does not put the current folder on sys.path for -m: tests import the
# installed package.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
H=${DIRECTML_WINE:-$HOME/.cache/dmlbridge-directml}
PY=$H/python312
ls "$PY"/.packages-* >/dev/null 2>&1 || bash "$HERE/setup.sh" --windows-python >/dev/null
case "${1:-}" in
--run)
    shift
    exec bash "$HERE/run.sh" "$PY/python.exe" "$@" ;;
--pip)
    shift
    only=--only-binary=:all:
    for a in "$@"; do [ "$a" = --no-deps ] && only=; done
    # (--upgrade replaces a package's files; what an older version had and the new one lacks stays)
    exec python3 -m pip install $only -q --disable-pip-version-check --root-user-action=ignore --upgrade \
        --target "$PY/Lib/site-packages" --platform win_amd64 --python-version 3.12 --implementation cp --abi cp312 \
        "$@" ;;
*)
    echo "usage: winpython.sh --run [PYTHON ARGS...] | --pip [PIP ARGS...]" >&2; exit 2 ;;
esac
