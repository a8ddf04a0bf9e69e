#!/usr/bin/env bash
# The Python the tests run (they compare `fai run` with numpy): the given python3 (CMake's,
# else the one on PATH) when it has numpy, else a virtual environment with numpy made under the
# build directory the first time and reused afterwards. Writes BUILD/test-python/bin/python3, a
# wrapper for the one chosen, which the tests find first on their PATH.
#
# Usage: python_env.sh BUILD_DIR [PYTHON3]
set -euo pipefail
build=${1:?usage: python_env.sh BUILD_DIR [PYTHON3]}
mkdir -p "$build"
build=$(cd "$build" && pwd)
python=${2:-}
if [ -z "$python" ] && [ -f "$build/CMakeCache.txt" ]; then
    python=$(sed -n 's/^Python3_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")
fi
[ -n "$python" ] || python=$(command -v python3 || true)
if [ -z "$python" ]; then
    echo "python_env: no python3 found: the tests need Python 3 (Debian: apt-get install python3)"
    exit 1
fi
env_dir="$build/pyenv"
wrapper_dir="$build/test-python/bin"
has_numpy() { "$1" -c 'import numpy' >/dev/null 2>&1; }

if has_numpy "$env_dir/bin/python3" 2>/dev/null; then
    chosen="$env_dir/bin/python3"
    why="with numpy, made by an earlier run"
elif has_numpy "$python"; then
    chosen="$python"
    why="which has numpy"
else
    echo "python_env: $python has no numpy: making $env_dir with numpy (once; later runs reuse" \
        "it)"
    rm -rf "$env_dir"
    if ! "$python" -m venv "$env_dir" >"$build/pyenv.log" 2>&1; then
        cat "$build/pyenv.log"
        echo "python_env: $python -m venv failed: install the venv module (Debian: apt-get" \
            "install python3-venv) or numpy itself (Debian: apt-get install python3-numpy)"
        exit 1
    fi
    if ! "$env_dir/bin/python3" -m pip install -q --disable-pip-version-check numpy \
        >>"$build/pyenv.log" 2>&1; then
        tail -5 "$build/pyenv.log"
        rm -rf "$env_dir"
        echo "python_env: pip could not install numpy into $env_dir (is the package index" \
            "reachable?); or install numpy for $python (Debian: apt-get install python3-numpy)"
        exit 1
    fi
    chosen="$env_dir/bin/python3"
    why="with numpy, made now"
fi

mkdir -p "$wrapper_dir"
printf '#!/bin/sh\nexec "%s" "$@"\n' "$chosen" >"$wrapper_dir/python3.tmp"
chmod +x "$wrapper_dir/python3.tmp"
mv "$wrapper_dir/python3.tmp" "$wrapper_dir/python3"
echo "python_env: the tests run $chosen ($why)"
