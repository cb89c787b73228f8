#!/usr/bin/env bash
# Fails when clang-format (.clang-format: Google style, 100 columns) would change any tracked C++
# file, naming each; with --fix, formats them in place instead. Needs clang-format
# (tools/setup.sh --lint) and a git checkout.
#
#   tools/check_format.sh          # CI: prints "//tools:check_format   PASSED" or FAILED
#   tools/check_format.sh --fix
set -uo pipefail
cd "$(dirname "$0")/.."

mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cuh' '*.cu')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
# One process for every file; its warnings name each file and line it would change.
mapfile -t bad < <(clang-format --dry-run -Werror "${files[@]}" 2>&1 |
  sed -nE 's/^([^:]+):[0-9]+:[0-9]+: (warning|error): .*/\1/p' | sort -u)
if [ ${#bad[@]} -ne 0 ]; then
  printf 'check_format: clang-format would change %s\n' "${bad[@]}" >&2
  echo "  (run tools/check_format.sh --fix)" >&2
  echo "//tools:check_format   FAILED (${#bad[@]} of ${#files[@]} files)"
  exit 1
fi
echo "//tools:check_format   PASSED (${#files[@]} files)"
