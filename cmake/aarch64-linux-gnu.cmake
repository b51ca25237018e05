# CMake toolchain for an AArch64 Linux build on an x86-64 Debian host (scripts/test-aarch64.sh):
# Debian's g++-aarch64-linux-gnu cross compiler, the arm64 multiarch libraries
# (dpkg --add-architecture arm64; libssl-dev:arm64 ...), programs run under qemu-aarch64.
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
# On an ARM host no toolchain file is needed: a plain `cmake -S . -B build` picks the NEON units.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(MIMO_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${MIMO_CROSS_TRIPLE}-gcc)
set(CMAKE_CXX_COMPILER ${MIMO_CROSS_TRIPLE}-g++)

# Libraries and headers: the multiarch arm64 paths first, then the arch-independent /usr/include
# (nlohmann-json, GoogleTest's headers) the host packages installed.
set(CMAKE_LIBRARY_ARCHITECTURE ${MIMO_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH /usr/${MIMO_CROSS_TRIPLE} /usr/lib/${MIMO_CROSS_TRIPLE})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)

# pkg-config: only the arm64 and arch-independent .pc files.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/${MIMO_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")

# Test executables run under user-mode emulation (ctest, gtest_discover_tests); -L points the
# emulator at the multiarch arm64 loader and libraries (libc6:arm64; see scripts/test-aarch64.sh).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
