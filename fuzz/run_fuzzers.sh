#!/usr/bin/env bash
# Runs every fuzzer of fuzz/ (built here with --config=fuzz) for SECONDS each (default 30), from its
# seed corpus and the inputs of earlier findings (but those not fixed yet), and fails on any finding: a crash, a sanitizer
# report, a leak, an input that runs over 10 s, or a broken invariant (fuzz/targets.h). Prints one
# line per fuzzer as Bazel prints a test ("//fuzz:csv_fuzzer  PASSED in 30s (...)"), which .ci/run
# counts. A finding's input is kept in fuzz-findings/ (or $WEFT_FUZZ_FINDINGS): replay it with
#   bazel run --config=fuzz //fuzz:<name>_fuzzer -- $PWD/fuzz-findings/<file>
# and, once fixed, add it to fuzz/regressions/<name>/ so tests/fuzz_regression_test keeps it.
#
#   tools/setup.sh --fuzz && fuzz/run_fuzzers.sh 30
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
findings=${WEFT_FUZZ_FINDINGS:-$PWD/fuzz-findings}
if ! bazel build --config=fuzz //fuzz/...; then
  echo "//fuzz:fuzzers   FAILED to build (--config=fuzz)"
  exit 1
fi
bin="$(bazel info --config=fuzz bazel-bin 2>/dev/null)/fuzz"
# In memory where possible: the targets rewrite a file per input (see fuzz/fuzz_util.cc).
shm=/dev/shm
[ -d "$shm" ] && [ -w "$shm" ] || shm=${TMPDIR:-/tmp}
work=$(mktemp -d -p "$shm" weft-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Fuzzer $1's earlier findings, less those known_failures.txt lists as not fixed yet (each would
# stop the run at once): copied to $work/$1/regressions.
regressions() {
  mkdir -p "$work/$1/regressions"
  local f
  for f in fuzz/regressions/"$1"/*; do
    [ -f "$f" ] || continue
    grep -q "^$1/$(basename "$f") " fuzz/regressions/known_failures.txt 2>/dev/null || cp "$f" "$work/$1/regressions/"
  done
}

# Runs fuzzer $1 for $seconds; prints its result line; returns non-zero on a finding.
run_one() {
  local name=$1
  mkdir -p "$work/$name/corpus" "$work/$name/artifacts"
  regressions "$name"
  local dirs=("fuzz/corpus/$name" "$work/$name/regressions")
  local start=$SECONDS
  TMPDIR="$work/$name" "$bin/${name}_fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$work/$name/artifacts/" "$work/$name/corpus" "${dirs[@]}" >"$work/$name.log" 2>&1
  local rc=$? elapsed=$((SECONDS - start))
  local runs
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$name.log" | tail -n 1)
  local found=("$work/$name/artifacts"/*)
  if [ "$rc" -eq 0 ] && [ ! -e "${found[0]}" ]; then
    local added
    added=$(ls "$work/$name/corpus" | wc -l)
    echo "//fuzz:${name}_fuzzer   PASSED in ${elapsed}s (${runs:-?} executions, ${added} new inputs)"
    return 0
  fi
  echo "//fuzz:${name}_fuzzer   FAILED in ${elapsed}s (exit ${rc} after ${runs:-?} executions); its log ends:"
  tail -n 60 "$work/$name.log" | sed 's/^/    /'
  mkdir -p "$findings"
  for f in "${found[@]}"; do
    [ -e "$f" ] || continue
    cp "$f" "$findings/${name}-$(basename "$f")"
    echo "    finding kept: $findings/${name}-$(basename "$f") ($(wc -c <"$f") bytes)"
  done
  return 1
}

status=0
for dir in fuzz/corpus/*/; do
  run_one "$(basename "$dir")" || status=1
done
exit "$status"
