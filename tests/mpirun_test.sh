#!/usr/bin/env bash
# Runs a test binary on 2 MPI ranks of this host: mpirun_test.sh <binary> [args...]. As root
# OpenMPI needs --allow-run-as-root; --oversubscribe lets 2 ranks share fewer cores. Fails when
# any rank fails, and when the job does not end within WEFT_MPIRUN_TIMEOUT seconds (default 240:
# a hang fails instead of waiting for Bazel's own timeout).
set -uo pipefail
binary=$1
shift
exec timeout --signal=KILL "${WEFT_MPIRUN_TIMEOUT:-240}" \
  mpirun -np "${WEFT_MPIRUN_NP:-2}" --allow-run-as-root --oversubscribe --bind-to none \
  -x WEFT_CPU_WORKERS="${WEFT_CPU_WORKERS:-1}" "$binary" "$@"
