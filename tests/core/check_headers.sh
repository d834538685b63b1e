#!/bin/sh
# SPDX-License-Identifier: MIT
# Each public header compiles alone, as C11 and as C++11, without warnings.
# Usage: check_headers.sh <include-dir>
set -eu
inc=$1
cc=${CC:-cc}
cxx=${CXX:-c++}
n=0
for h in "$inc"/cmetal/*.h; do
  name=cmetal/$(basename "$h")
  printf '#include <%s>\n' "$name" | $cc -std=c11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$inc" -x c -
  printf '#include <%s>\n' "$name" | $cxx -std=c++11 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I"$inc" -x c++ -
  n=$((n + 1))
done
echo "$n headers compile alone as C11 and C++11"
