# SPDX-License-Identifier: MIT
# Cross-compiles cmetal for macOS with `zig cc`. No macOS SDK is needed: the
# library reaches libobjc, the blocks runtime and Metal through dlopen and
# declares what it uses itself.
#
#   cmake -S . -B build/macos-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/zig-macos.cmake \
#         -DCMETAL_ZIG_TARGET=aarch64-macos -DCMETAL_BUILD_TESTS=OFF -DCMETAL_BUILD_TOOLS=OFF
#
# CMETAL_ZIG_TARGET  aarch64-macos (default) or x86_64-macos
# CMETAL_ZIG         the zig binary (default: .deps/zig/zig, from
#                    tools/install-deps.sh --test)
set(CMAKE_SYSTEM_NAME Darwin)
# Darwin 20: macOS 11, the first with Apple silicon.
set(CMAKE_SYSTEM_VERSION 20.0)
if(NOT CMETAL_ZIG_TARGET)
  set(CMETAL_ZIG_TARGET aarch64-macos)
endif()
if(NOT CMETAL_ZIG)
  get_filename_component(CMETAL_ZIG "${CMAKE_CURRENT_LIST_DIR}/../.deps/zig/zig" ABSOLUTE)
endif()
if(NOT EXISTS "${CMETAL_ZIG}")
  message(FATAL_ERROR "zig-macos.cmake: no zig at ${CMETAL_ZIG} "
    "(run tools/install-deps.sh --test or pass -DCMETAL_ZIG=/path/to/zig)")
endif()
if(CMETAL_ZIG_TARGET MATCHES "^aarch64")
  set(CMAKE_SYSTEM_PROCESSOR arm64)
elseif(CMETAL_ZIG_TARGET MATCHES "^x86_64")
  set(CMAKE_SYSTEM_PROCESSOR x86_64)
else()
  message(FATAL_ERROR "zig-macos.cmake: CMETAL_ZIG_TARGET=${CMETAL_ZIG_TARGET}: "
    "expected aarch64-macos or x86_64-macos")
endif()
# try_compile projects configure with the same toolchain and need these too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES CMETAL_ZIG CMETAL_ZIG_TARGET)

# CMake wants one program per tool: small wrappers around zig's subcommands.
set(cm_zig_wrappers "${CMAKE_BINARY_DIR}/zig-${CMETAL_ZIG_TARGET}")
foreach(tool cc ar ranlib)
  if(tool STREQUAL "cc")
    set(cm_zig_command "cc -target ${CMETAL_ZIG_TARGET}")
  else()
    set(cm_zig_command "${tool}")
  endif()
  file(WRITE "${cm_zig_wrappers}/${tool}"
       "#!/bin/sh\nexec \"${CMETAL_ZIG}\" ${cm_zig_command} \"$@\"\n")
  file(CHMOD "${cm_zig_wrappers}/${tool}"
       PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                   WORLD_READ WORLD_EXECUTE)
endforeach()
set(CMAKE_C_COMPILER "${cm_zig_wrappers}/cc")
set(CMAKE_AR "${cm_zig_wrappers}/ar" CACHE FILEPATH "zig ar" FORCE)
set(CMAKE_RANLIB "${cm_zig_wrappers}/ranlib" CACHE FILEPATH "zig ranlib" FORCE)

# Header-only, platform-independent dependencies are borrowed from the host
# (dlpack/dlpack.h from libdlpack-dev; Criterion's headers, for the test
# sources that tools/ci/stage-40-macos.sh compiles), each through its own
# folder so that the rest of the host's /usr/include stays out of a macOS
# build.
set(cm_zig_host_headers "${cm_zig_wrappers}/host-include")
file(MAKE_DIRECTORY "${cm_zig_host_headers}")
foreach(dir dlpack criterion)
  if(EXISTS "/usr/include/${dir}" AND NOT EXISTS "${cm_zig_host_headers}/${dir}")
    file(CREATE_LINK "/usr/include/${dir}" "${cm_zig_host_headers}/${dir}" SYMBOLIC)
  endif()
endforeach()
set(CMAKE_C_FLAGS_INIT "-isystem ${cm_zig_host_headers}")

set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)

# The dylib is found through the loader's rpath (@rpath/libcmetal.0.dylib),
# not through the path of this build tree.
set(CMAKE_INSTALL_NAME_DIR "@rpath")
set(CMAKE_BUILD_WITH_INSTALL_NAME_DIR ON)
