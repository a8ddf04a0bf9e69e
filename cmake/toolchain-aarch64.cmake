# Cross build for AArch64 Linux with Debian's cross compiler (gcc-aarch64-linux-gnu,
# libc6-dev-arm64-cross); the tests run under qemu user emulation (qemu-user):
#
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake
#   cmake --build build-aarch64 && (cd build-aarch64 && ctest)
#
# FAI_CROSS_PREFIX and FAI_CROSS_SYSROOT override the compiler prefix and the target root.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

if(NOT DEFINED FAI_CROSS_PREFIX)
  set(FAI_CROSS_PREFIX aarch64-linux-gnu-)
endif()
if(NOT DEFINED FAI_CROSS_SYSROOT)
  set(FAI_CROSS_SYSROOT /usr/aarch64-linux-gnu)
endif()

set(CMAKE_C_COMPILER ${FAI_CROSS_PREFIX}gcc)
set(CMAKE_CXX_COMPILER ${FAI_CROSS_PREFIX}g++)

# libraries and headers from the target root only; programs (python3, c++) from the host
set(CMAKE_FIND_ROOT_PATH ${FAI_CROSS_SYSROOT})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest runs every test whose command is a built executable through this
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-L;${FAI_CROSS_SYSROOT})
