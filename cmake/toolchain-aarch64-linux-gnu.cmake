# SPDX-License-Identifier: MIT
# Cross-compiles cmetal, its tests and softmetal for aarch64 Linux with
# Debian's cross GCC; tests run under qemu-aarch64 (user mode) through
# tools/ci/qemu/run.sh, which ctest puts before every test command.
#
#   cmake -S . -B build/arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64-linux-gnu.cmake
#
# Libraries: glibc and libstdc++ from the cross packages
# (/usr/aarch64-linux-gnu); libobjc, libBlocksRuntime, Criterion and what
# Criterion needs from arm64 .debs unpacked into CMETAL_ARM64_SYSROOT
# (default .deps/arm64/sysroot; tools/install-deps.sh --test fills it).
# Nothing arm64 is installed as a package.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

if(NOT CMETAL_ARM64_SYSROOT)
  get_filename_component(CMETAL_ARM64_SYSROOT
    "${CMAKE_CURRENT_LIST_DIR}/../.deps/arm64/sysroot" ABSOLUTE)
endif()
if(NOT EXISTS "${CMETAL_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")
  message(FATAL_ERROR "toolchain-aarch64-linux-gnu.cmake: no arm64 libraries in "
    "${CMETAL_ARM64_SYSROOT} (run tools/install-deps.sh --test or pass "
    "-DCMETAL_ARM64_SYSROOT=...)")
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CMETAL_ARM64_SYSROOT)

# Libraries and headers only from the cross root and the unpacked .debs;
# programs (clang++, sh) from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu "${CMETAL_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# GNU libobjc's headers and libobjc.so live in GCC's own folder.
set(cm_arm64_gcc "${CMETAL_ARM64_SYSROOT}/usr/lib/gcc/aarch64-linux-gnu/12")
list(APPEND CMAKE_INCLUDE_PATH "${cm_arm64_gcc}/include")
list(APPEND CMAKE_LIBRARY_PATH "${cm_arm64_gcc}")

# pkg-config (Criterion) reads the unpacked .pc files.
set(cm_arm64_libdir "${CMETAL_ARM64_SYSROOT}/usr/lib/aarch64-linux-gnu")
set(ENV{PKG_CONFIG_LIBDIR}
    "${cm_arm64_libdir}/pkgconfig:${CMETAL_ARM64_SYSROOT}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${CMETAL_ARM64_SYSROOT}")
set(ENV{PKG_CONFIG_PATH} "")

# The linker resolves the libraries' own dependencies in the unpacked root;
# at run time qemu's environment names them (tools/ci/qemu/run.sh).
foreach(kind EXE SHARED MODULE)
  set(CMAKE_${kind}_LINKER_FLAGS_INIT
      "-Wl,-rpath-link,${cm_arm64_libdir}:${CMETAL_ARM64_SYSROOT}/lib/aarch64-linux-gnu")
endforeach()

get_filename_component(cm_qemu_run "${CMAKE_CURRENT_LIST_DIR}/../tools/ci/qemu/run.sh"
                       ABSOLUTE)
set(CMAKE_CROSSCOMPILING_EMULATOR "${cm_qemu_run}")
