#!/usr/bin/env bash
# A rank that hangs or dies must not leave the others waiting: dist_failure_child (rank 1 fails
# after three all-reduces) under mpirun -np 2 with a 3 s collective time limit must end with a
# non-zero status, well within the wrapper's own 120 s limit (a hang fails as a timeout), and:
#   hang:            rank 0 aborts the job with the error naming the collective and the ranks;
#   hang, no abort:  rank 0 catches that error (WaitToRead) and exits;
#   kill:            the job ends (mpirun notices the dead rank, or rank 0 times out).
set -uo pipefail
child=$1
run() {  # run <label> <env...> -- <mode>: the job's output in $out, its status in $status
  local label=$1
  shift
  out=$(env "$@" WEFT_MPIRUN_TIMEOUT=120 WEFT_DIST_TIMEOUT=3 "$(dirname "$0")/mpirun_test.sh" \
        -x WEFT_DIST_TIMEOUT -x WEFT_DIST_ABORT_ON_TIMEOUT "$child" "$mode" 2>&1)
  status=$?
  echo "== $label: status $status"
  echo "$out" | sed 's/^/   /'
}
fail=0
expect() {  # expect <what> <grep pattern>
  if ! grep -qE "$2" <<<"$out"; then echo "FAILED: $1 (no match for '$2')"; fail=1; fi
}
check_common() {
  [ "$status" -ne 0 ] || { echo "FAILED: the job ended with status 0"; fail=1; }
  [ "$status" -ne 124 ] || { echo "FAILED: the job hung until the wrapper's limit"; fail=1; }
  expect "both ranks ran the first collectives" "rank 0: three all-reduces done"
  if grep -q UNEXPECTED <<<"$out"; then echo "FAILED: a collective completed without rank 1"; fail=1; fi
}
message='collective #3 all-reduce \(sum of 4 float32 in 1 array\) on rank 0 of 2 \(mpi\) did not complete within 3 s'

mode=hang run "hang" WEFT_DIST_ABORT_ON_TIMEOUT=1
check_common
expect "the error, aborting the job" "weft::Error: .*${message}.*aborting the job"

mode=hang run "hang, no abort" WEFT_DIST_ABORT_ON_TIMEOUT=0
check_common
expect "the error raised on rank 0" "caught: .*${message}"

mode=kill run "kill" WEFT_DIST_ABORT_ON_TIMEOUT=1
check_common
expect "the job ended for the dead rank" "signal 9|Killed|${message}"

[ "$fail" -eq 0 ] && echo "dist_failure_test: PASSED"
exit "$fail"
