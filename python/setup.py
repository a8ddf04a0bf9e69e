"""Builds libfai with CMake and ships it inside the package (pip install ./python).

Where libfai comes from, in order:
  FAI_LIBRARY=/path/to/libfai.so   an existing library, copied into the package as it is;
  FAI_SOURCE_DIR=/path/to/fai      the source tree to build (default: this directory's parent),
                                   with CMake (target fai_shared, Release); FAI_CMAKE_ARGS adds
                                   arguments to the configure step.
The package has no compiled extension: it loads the library with ctypes.
"""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
LIBNAME = "libfai.so"


def _log(msg):
    print(f"fai: {msg}", file=sys.stderr, flush=True)


def _source_dir():
    src = os.environ.get("FAI_SOURCE_DIR") or os.path.dirname(HERE)
    src = os.path.abspath(src)
    if not (os.path.isfile(os.path.join(src, "CMakeLists.txt"))
            and os.path.isfile(os.path.join(src, "include", "fai.h"))):
        raise SystemExit(
            f"fai: no fai source tree at {src} (CMakeLists.txt and include/fai.h). Install from "
            "the repository (pip install ./python), set FAI_SOURCE_DIR to a checkout, or set "
            "FAI_LIBRARY to an existing libfai.so")
    return src


def _cmake_build(src, build_dir):
    cmake = shutil.which("cmake")
    if not cmake:
        raise SystemExit(
            "fai: CMake (>= 3.16) and a C11 compiler are needed to build libfai: install them "
            "(apt-get install cmake gcc, or pip install cmake), or set FAI_LIBRARY to an existing "
            "libfai.so")
    cache = os.path.join(build_dir, "CMakeCache.txt")
    if os.path.exists(cache):
        # a build directory configured for another source tree cannot be reused
        with open(cache, encoding="utf-8", errors="replace") as f:
            home = [ln.split("=", 1)[1].strip() for ln in f
                    if ln.startswith("CMAKE_HOME_DIRECTORY:")]
        if not home or os.path.realpath(home[0]) != os.path.realpath(src):
            shutil.rmtree(build_dir)
    os.makedirs(build_dir, exist_ok=True)
    configure = [cmake, "-S", src, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release"]
    configure += shlex.split(os.environ.get("FAI_CMAKE_ARGS", ""))
    jobs = str(os.cpu_count() or 2)
    _log(f"building libfai: {' '.join(configure)}")
    subprocess.check_call(configure, stdout=subprocess.DEVNULL)
    subprocess.check_call([cmake, "--build", build_dir, "--target", "fai_shared", "-j", jobs])
    built = os.path.join(build_dir, LIBNAME)
    if not os.path.exists(built):
        raise SystemExit(f"fai: the CMake build did not produce {built}")
    return built


class BuildPyWithLibrary(build_py):
    """build_py, then libfai.so next to the package's modules."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            dest_dir = os.path.join(HERE, "fai")
        else:
            dest_dir = os.path.join(self.build_lib, "fai")
        os.makedirs(dest_dir, exist_ok=True)
        dest = os.path.join(dest_dir, LIBNAME)
        given = os.environ.get("FAI_LIBRARY")
        if given:
            if not os.path.isfile(given):
                raise SystemExit(f"fai: FAI_LIBRARY={given} is not a file")
            lib = given
            _log(f"using FAI_LIBRARY={given}")
        else:
            build_temp = self.get_finalized_command("build").build_temp
            lib = _cmake_build(_source_dir(), os.path.join(os.path.abspath(build_temp), "cmake"))
        # copy the file itself (libfai.so is a symlink chain to the versioned file)
        shutil.copyfile(os.path.realpath(lib), dest)
        os.chmod(dest, 0o755)

    def get_outputs(self, include_bytecode=1):
        outputs = super().get_outputs(include_bytecode)
        return outputs + [os.path.join(self.build_lib, "fai", LIBNAME)]


class PlatformWheel(bdist_wheel):
    """The wheel holds a native library: tag it for this platform, any Python 3."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(cmdclass={"build_py": BuildPyWithLibrary, "bdist_wheel": PlatformWheel})
