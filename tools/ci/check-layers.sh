#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The layer check of runtime/: every object of the static library may call
# only functions defined in its own layer or the layers below it, in the
# order the "layers" block of ARCHITECTURE.md gives (bottom first). Reads
# each object's defined and undefined symbols with nm; a call upward, an
# object the block does not place, or a placed file the library lacks
# (where CMake built it) fails, naming the file, the symbol and both
# layers. About a second.
#
#   tools/ci/check-layers.sh LIBCMETAL.a [ARCHITECTURE.md]
set -euo pipefail
lib=${1:?usage: check-layers.sh LIBCMETAL.a [ARCHITECTURE.md]}
doc=${2:-$(dirname "$0")/../../ARCHITECTURE.md}
nm=${NM:-nm}

# "rank file..." lines between the block's markers.
ranks=$(awk '/^```layers$/ {on = 1; next} on && /^```$/ {exit}
             on { sub(/#.*/, ""); if (NF) for (i = 2; i <= NF; ++i) print $i, $1 }' "$doc")
[ -n "$ranks" ] || { echo "check-layers: no \`\`\`layers block in $doc" >&2; exit 1; }

# nm -A on an archive prints "lib.a:member.o: ..." for each symbol.
defs=$("$nm" -A --defined-only "$lib" 2>/dev/null |
       awk '$(NF-1) ~ /^[TDBRCGSV]$/ {n = split($1, p, ":"); print $NF, p[n-1]}')
uses=$("$nm" -A -u "$lib" 2>/dev/null | awk '{n = split($1, p, ":"); print p[n-1], $NF}')
members=$(ar t "$lib")

fail=0
# Every object is placed.
for m in $members; do
  f=${m%.o}
  if ! grep -q "^$f " <<<"$ranks"; then
    echo "check-layers: $f is in no layer of $doc's layers block" >&2
    fail=1
  fi
done

# Every call goes down (or stays in its layer).
report=$(awk -v ranks="$ranks" -v defs="$defs" '
  BEGIN {
    n = split(ranks, r, "\n"); for (i = 1; i <= n; ++i) { split(r[i], w, " "); rank[w[1]] = w[2] }
    n = split(defs, d, "\n"); for (i = 1; i <= n; ++i) { split(d[i], w, " "); def[w[1]] = w[2] }
  }
  {
    user = $1; sub(/\.o$/, "", user); sym = $2
    if (!(sym in def)) next
    owner = def[sym]; sub(/\.o$/, "", owner)
    if (owner == user || !(user in rank) || !(owner in rank)) next
    if (rank[owner] + 0 > rank[user] + 0)
      printf "check-layers: %s (layer %s) calls %s of %s (layer %s), a layer above it\n",
             user, rank[user], sym, owner, rank[owner]
  }' <<<"$uses")
if [ -n "$report" ]; then
  echo "$report" >&2
  fail=1
fi
[ "$fail" = 0 ] && echo "check-layers: $(wc -l <<<"$members") objects, every call goes down"
exit "$fail"
