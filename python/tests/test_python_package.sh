#!/usr/bin/env bash
# The Python package as a user gets it: `pip install ./python` into a fresh virtual environment
# (the build runs CMake on this repository and ships libfai.so inside the package), then the
# package's pytest suite (this directory; cli/ holds the tool's tests, which ctest runs itself)
# against a float64 numpy reference; the FAI_LIBRARY fallback (an existing libfai.so) at install
# and at import time.
#
# torch (the comparison with scaled_dot_product_attention) and transformers (attn_implementation
# "fai" against "sdpa" on tiny models): the PyPI torch wheel brings about 5 GB of CUDA libraries
# and takes about 2 minutes to install, so both are installed only when FAI_TEST_TORCH=1, which CI
# sets (CI=true), or when the python3 running this script has both (a developer who has them gets
# their tests); otherwise those tests are skipped with a reason.
set -euo pipefail
fai=${1:?usage: test_python_package.sh /path/to/fai}
root=$(cd "$(dirname "$0")/../.." && pwd)
build_dir=$(cd "$(dirname "$fai")" && pwd)

case "$fai" in
*/emulated/*)
    echo "test_python_package: skipped in a cross build (the native build tests the package)"
    exit 0
    ;;
esac
if grep -qE '^FAI_(SANITIZE|TSAN|COVERAGE):BOOL=ON' "$build_dir/CMakeCache.txt" 2>/dev/null; then
    echo "test_python_package: skipped in an instrumented build (the package builds its own" \
        "Release libfai; the release build tests it)"
    exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1; then
    cat "$tmp/venv.log"
    echo "test_python_package: python3 -m venv failed (Debian: apt-get install python3-venv)"
    exit 1
fi
py="$tmp/venv/bin/python"
pip=("$py" -m pip install -q --disable-pip-version-check)
"${pip[@]}" numpy pytest ml_dtypes pyflakes

# 0. the package and its tests have no unused names, undefined names or redefinitions (pyflakes:
# the Python counterpart of the C build's -Wall -Werror)
"$py" -m pyflakes "$root/python/fai" "$root/python/tests" ||
    { echo "test_python_package: pyflakes found the above"; exit 1; }

# 1. FAI_LIBRARY at install time: the given library is copied into the package, no CMake
if [ -f "$build_dir/libfai.so" ]; then
    (cd "$root" && FAI_LIBRARY="$build_dir/libfai.so" "${pip[@]}" --no-deps ./python)
    (cd "$tmp" && "$py" - <<'PY'
import os, numpy as np, fai
assert os.path.dirname(fai.library_path()) == os.path.dirname(fai.__file__), fai.library_path()
q = np.ones((1, 2, 2, 8), np.float32)
assert np.allclose(fai.attention(q, q, q), 1.0)
PY
    )
    echo "test_python_package: install with FAI_LIBRARY: ok"
fi

# 2. the real thing, from the repository root: builds libfai with CMake
(cd "$root" && "${pip[@]}" --force-reinstall --no-deps ./python)

# 3. FAI_LIBRARY at import time overrides the packaged library
if [ -f "$build_dir/libfai.so" ]; then
    (cd "$tmp" && FAI_LIBRARY="$build_dir/libfai.so" "$py" -c '
import os, sys, fai
assert fai.library_path() == os.environ["FAI_LIBRARY"], fai.library_path()
')
    (cd "$tmp" && FAI_LIBRARY="$tmp/missing.so" "$py" -c 'import fai' 2>"$tmp/err") &&
        { echo "import fai with FAI_LIBRARY naming a missing file succeeded"; exit 1; }
    grep -q "FAI_LIBRARY" "$tmp/err" || { echo "no FAI_LIBRARY message:"; cat "$tmp/err"; exit 1; }
    echo "test_python_package: FAI_LIBRARY at import: ok"
fi

want_torch=${FAI_TEST_TORCH:-}
if [ -z "$want_torch" ] && [ "${CI:-}" = true ]; then want_torch=1; fi
if [ -z "$want_torch" ] && python3 -c 'import torch, transformers' >/dev/null 2>&1; then
    want_torch=1
fi
if [ "$want_torch" = 1 ]; then
    for package in torch transformers; do
        start=$(date +%s)
        if "${pip[@]}" "$package" >"$tmp/$package.log" 2>&1; then
            echo "test_python_package: $package installed in $(($(date +%s) - start)) s"
        else
            tail -3 "$tmp/$package.log"
            echo "test_python_package: $package could not be installed: its tests are skipped"
        fi
    done
else
    echo "test_python_package: torch and transformers not installed (a 5 GB download;" \
        "FAI_TEST_TORCH=1 adds them): the comparison with scaled_dot_product_attention and" \
        "the transformers integration tests are skipped"
fi

# the installed package, not the source tree, is imported: run from the temporary directory
cd "$tmp"
"$py" -c 'import fai, sys; print("test_python_package: fai from", fai.__file__)'
"$py" -m pytest -q -rs -p no:cacheprovider "$root/python/tests"
