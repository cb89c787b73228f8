#!/usr/bin/env bash
# A rank that hangs, dies or throws must not leave the others waiting: dist_failure_child under
# mpirun -np 2 with a 3 s collective time limit must end with a non-zero status, well within the
# wrapper's own 30 s limit per job (a hang fails as a timeout, well within Bazel's). Rank 1 fails
# after three all-reduces:
#   hang:            rank 0 aborts the job with the error naming the collective and the ranks;
#   hang, no abort:  rank 0 catches that error (WaitToRead) and exits;
#   kill:            the job ends (mpirun notices the dead rank, or rank 0 times out).
# Rank 1 fails in the middle of a training step (step 3), inside backward, after two layers'
# gradients were written (their all-reduces handed over) and before the first layer's (rank 0
# waits for those, and for any of the others rank 1 had not finished):
#   step_hang:           an op of rank 1's backward never returns: rank 0 aborts the job with the
#                        error naming the first layer's all-reduce;
#   step_hang, no abort: rank 0 catches that error and exits;
#   step_kill:           rank 1 dies: the job ends;
#   step_throw:          rank 1's backward throws: rank 1's step fails with that error, and the job
#                        ends with rank 0's error (or rank 1's own, at shutdown, for the
#                        all-reduces it pushed and could not run).
set -uo pipefail
child=$1
run() {  # run <label> <env...> -- <mode>: the job's output in $out, its status in $status
  local label=$1
  shift
  out=$(env "$@" WEFT_MPIRUN_TIMEOUT=30 WEFT_DIST_TIMEOUT=3 "$(dirname "$0")/mpirun_test.sh" \
        -x WEFT_DIST_TIMEOUT -x WEFT_DIST_ABORT_ON_TIMEOUT "$child" "$mode" 2>&1)
  status=$?
  echo "== $label: status $status"
  echo "$out" | sed 's/^/   /'
}
fail=0
expect() {  # expect <what> <grep pattern>
  if ! grep -qE "$2" <<<"$out"; then echo "FAILED: $1 (no match for '$2')"; fail=1; fi
}
check_common() {  # check_common <what both ranks printed before rank 1 failed>
  [ "$status" -ne 0 ] || { echo "FAILED: the job ended with status 0"; fail=1; }
  [ "$status" -ne 124 ] || { echo "FAILED: the job hung until the wrapper's limit"; fail=1; }
  expect "both ranks ran what came before the failure" "$1"
  if grep -q UNEXPECTED <<<"$out"; then echo "FAILED: a collective completed without rank 1"; fail=1; fi
}
# hang_and_kill <hang mode> <kill mode> <what both ranks printed before> <rank 0's time-out
# message when rank 1 hangs> <... when it dies>: rank 1 hangs (rank 0 aborts the job; without
# abort, rank 0 catches the error), then dies.
hang_and_kill() {
  mode=$1 run "$1" WEFT_DIST_ABORT_ON_TIMEOUT=1
  check_common "$3"
  expect "the error, aborting the job" "weft::Error: .*$4.*aborting the job"
  mode=$1 run "$1, no abort" WEFT_DIST_ABORT_ON_TIMEOUT=0
  check_common "$3"
  expect "the error raised on rank 0" "caught: .*$4"
  mode=$2 run "$2" WEFT_DIST_ABORT_ON_TIMEOUT=1
  check_common "$3"
  expect "the job ended for the dead rank" "signal 9|Killed|$5"
}

message='collective #3 all-reduce \(sum of 4 float32 in 1 array\) on rank 0 of 2 \(mpi\) did not complete within 3 s'
hang_and_kill hang kill 'rank 0: three all-reduces done' "$message" "$message"

# The trainer's collectives: 6 broadcasts (#0-5), then 6 all-reduces a step, last layer first:
# step 3's are #18-23, and fc1's bias (16 floats) and weight (96) are #22 and #23. A rank 1 that
# hangs in backward has finished the others (its progress thread drives them); one that dies may
# not have, and rank 0 then times out on the first of #18-23 that rank 1 had not finished.
before='rank 1: step 2 done'
step_message='collective #2[23] all-reduce \(average of (16|96) float32 in 1 array\) on rank 0 of 2 \(mpi\) did not complete within 3 s'
step_kill_message='collective #(1[89]|2[0-3]) all-reduce .* on rank 0 of 2 \(mpi\) did not complete within 3 s'
hang_and_kill step_hang step_kill "$before" "$step_message" "$step_kill_message"

# The same death with a launcher that keeps the job going (--enable-recovery: mpirun neither ends
# the job for the dead rank nor reports the ranks' statuses; Open MPI 4.1's mpirun exits 0 even
# after rank 0's MPI_Abort, so the status is not checked): rank 0's own time limit must end it,
# with the error naming a collective of step 3 that rank 1 had not finished (#18-23); without
# that time limit the job would hang, and fail at the wrapper's limit.
mode=step_kill run "step_kill, the launcher keeps the job" WEFT_DIST_ABORT_ON_TIMEOUT=1 WEFT_MPIRUN_OPTIONS=--enable-recovery
[ "$status" -ne 124 ] || { echo "FAILED: the job hung until the wrapper's limit"; fail=1; }
expect "rank 0 ended the job with its error" "weft::Error: .*${step_kill_message}.*aborting the job"

mode=step_throw run "step_throw" WEFT_DIST_ABORT_ON_TIMEOUT=1
check_common "$before"
expect "rank 1's step failed with its error" "rank 1: step 3 failed: .*injected failure in rank 1's backward"
expect "the job ended with a time-out's error" "${step_message}|rank 1 of 2: 2 collective\(s\) pushed but not complete at shutdown"

[ "$fail" -eq 0 ] && echo "dist_failure_test: PASSED"
exit "$fail"
