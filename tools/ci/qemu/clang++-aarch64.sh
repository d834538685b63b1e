#!/bin/sh
# SPDX-License-Identifier: MIT
# softmetal's kernel compiler for aarch64 programs under qemu (SOFTMETAL_CXX):
# the host's clang++-19 emitting aarch64 code against the cross headers and
# libraries of Debian's g++-aarch64-linux-gnu.
exec clang++-19 --target=aarch64-linux-gnu "$@"
