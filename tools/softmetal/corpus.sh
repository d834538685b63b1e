#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Lays out the third-party MSL corpus that tests/softmetal/test_corpus.c runs,
# from local copies of the projects named in tests/softmetal/corpus/MANIFEST.tsv.
#
#   tools/softmetal/corpus.sh SRC_DIR OUT_DIR
#
# SRC_DIR holds one git repository per project, named as the manifest's
# `project` column (SRC_DIR/mlx, SRC_DIR/ggml): a clone, or a bare copy, that
# contains the named commit. Each file is read at that commit, its quoted
# #includes are inlined (tests/softmetal/corpus/inline.py) and the result is
# written to OUT_DIR, after both hashes in the manifest have matched. Then:
#
#   CMETAL_MSL_CORPUS=OUT_DIR ctest -R test_softmetal_corpus   (in a build directory)
set -euo pipefail

usage() { echo "usage: $0 SRC_DIR OUT_DIR" >&2; exit 2; }
[ "$#" -eq 2 ] || usage
src=$1 out=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
manifest=$here/tests/softmetal/corpus/MANIFEST.tsv
inline=$here/tests/softmetal/corpus/inline.py
[ -d "$src" ] || { echo "corpus.sh: SRC_DIR '$src' is not a directory" >&2; exit 2; }
command -v python3 >/dev/null || { echo "corpus.sh: python3 is needed" >&2; exit 1; }
command -v sha256sum >/dev/null || { echo "corpus.sh: sha256sum is needed" >&2; exit 1; }

git_dir_of() { # a work tree's .git or a bare repository
  local d=$1
  if [ -d "$d/.git" ] || [ -f "$d/.git" ]; then git -C "$d" rev-parse --absolute-git-dir
  else git --git-dir="$d" rev-parse --absolute-git-dir; fi 2>/dev/null
}

mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count=0
while IFS=$'\t' read -r file project repository commit path include_dirs source_sha out_sha _kernels; do
  case "$file" in ''|'#'*|out) continue ;; esac
  gd=$(git_dir_of "$src/$project") || {
    echo "corpus.sh: $src/$project is not a git repository (want a clone of $repository)" >&2; exit 1; }
  git --git-dir="$gd" cat-file -e "$commit^{commit}" 2>/dev/null || {
    echo "corpus.sh: $src/$project lacks commit $commit of $repository" \
         "(git -C $src/$project fetch origin $commit)" >&2; exit 1; }
  got=$(git --git-dir="$gd" show "$commit:$path" | sha256sum | cut -d' ' -f1)
  [ "$got" = "$source_sha" ] || {
    echo "corpus.sh: $repository $commit:$path has sha256 $got, the manifest says $source_sha" >&2; exit 1; }
  dirs=()
  [ "$include_dirs" = "-" ] || IFS=',' read -r -a dirs <<<"$include_dirs"
  python3 "$inline" "$gd" "$commit" "$path" ${dirs[@]+"${dirs[@]}"} > "$tmp/f"
  got=$(sha256sum "$tmp/f" | cut -d' ' -f1)
  [ "$got" = "$out_sha" ] || {
    echo "corpus.sh: laid-out $file has sha256 $got, the manifest says $out_sha" >&2; exit 1; }
  mkdir -p "$(dirname "$out/$file")"
  mv "$tmp/f" "$out/$file"
  count=$((count + 1))
  echo "corpus.sh: $file ($repository $commit:$path)"
done < "$manifest"
echo "corpus.sh: $count files in $out; run: CMETAL_MSL_CORPUS=$(cd "$out" && pwd) ctest -R test_softmetal_corpus"
