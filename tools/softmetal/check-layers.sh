#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks softmetal's layers: every object file calls only files on lower
# layers, in the order ARCHITECTURE.md gives (its ```layers softmetal
# block: one layer a line, bottom first, files by name without .c; a line
# "knot A B" lets A call B though B is not below, for a circle the document
# names and defends). A file's calls are the undefined symbols of its
# object (nm -u) that another object of the library defines; a call to a
# file on the same layer or above, or from a file the order does not name,
# fails the check. The count of every file's calls is printed.
#   check-layers.sh ARCHITECTURE.md OBJECT...
set -euo pipefail
doc=$1
shift
# ctest passes the objects as one ;-separated list ($<TARGET_OBJECTS:...>).
objs=()
for a in "$@"; do
  IFS=';' read -r -a parts <<<"$a"
  objs+=("${parts[@]}")
done
set -- "${objs[@]}"
[ $# -gt 0 ] || { echo "check-layers: no object files given" >&2; exit 2; }
NM=${NM:-nm}

# The order: "file layer" pairs, and the knots.
order=$(awk '/^```layers softmetal/ {on = 1; next} on && /^```/ {exit}
             on && $1 == "knot" {next}
             on && NF && $1 !~ /^#/ {n++; for (i = 1; i <= NF; i++) print $i, n}' "$doc")
knots=$(awk '/^```layers softmetal/ {on = 1; next} on && /^```/ {exit}
             on && $1 == "knot" {print $2, $3}' "$doc")
[ -n "$order" ] || { echo "check-layers: no \`\`\`layers softmetal block in $doc" >&2; exit 2; }

defs=$(mktemp) uses=$(mktemp)
trap 'rm -f "$defs" "$uses"' EXIT
# One nm for all objects: "path/sm_x.c.o:<value> <type> <symbol>" a line.
stem='{f = $1; sub(/:[^:]*$/, "", f); sub(/.*\//, "", f); sub(/\..*/, "", f)}'
"$NM" -A -g --defined-only "$@" | awk "$stem"' {print $NF, f}' | sort -u >"$defs"
"$NM" -A -u "$@" | awk "$stem"' {print $NF, f}' | sort -u >"$uses"

# "caller callee symbol" for each call between two files.
join "$uses" "$defs" | awk '$2 != $3 {print $2, $3, $1}' |
  awk -v order="$order" -v knots="$knots" '
    BEGIN {
      n = split(order, a, "\n"); for (i = 1; i <= n; i++) { split(a[i], p, " "); layer[p[1]] = p[2] }
      n = split(knots, a, "\n"); for (i = 1; i <= n; i++) knot[a[i]] = 1
    }
    {
      calls[$1]++
      if (!($1 in layer)) { bad[$1 " (not in the order) -> " $2] = bad[$1 " (not in the order) -> " $2] " " $3; next }
      if (!($2 in layer)) { bad[$1 " -> " $2 " (not in the order)"] = bad[$1 " -> " $2 " (not in the order)"] " " $3; next }
      if (layer[$2] < layer[$1] || (($1 " " $2) in knot)) next
      bad[$1 " (layer " layer[$1] ") -> " $2 " (layer " layer[$2] ")"] = bad[$1 " (layer " layer[$1] ") -> " $2 " (layer " layer[$2] ")"] " " $3
    }
    END {
      for (f in calls) printf "check-layers: %s: takes %d symbols from other files\n", f, calls[f] | "sort"
      close("sort")
      nbad = 0
      for (k in bad) { printf "check-layers: upward call: %s:%s\n", k, bad[k]; nbad++ }
      if (nbad) { printf "check-layers: %d upward edge(s) against the order in ARCHITECTURE.md\n", nbad; exit 1 }
      print "check-layers: every call goes down the layers"
    }'
