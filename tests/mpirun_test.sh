#!/usr/bin/env bash
# Runs a test binary on 2 MPI ranks of this host: mpirun_test.sh <binary> [args...]. As root
# OpenMPI needs --allow-run-as-root; --oversubscribe lets 2 ranks share fewer cores. Fails when
# any rank fails, and with status 124 when the job does not end within WEFT_MPIRUN_TIMEOUT seconds (default 240:
# a hang fails instead of waiting for Bazel's own timeout).
# Under --config=asan the ranks run without LeakSanitizer: OpenMPI keeps allocations to exit
# that it never frees, in components it has unloaded by then, so they cannot be suppressed by
# library; AddressSanitizer's other checks stay on (dist_test checks weft's dist code for leaks).
set -uo pipefail
if [ -n "${ASAN_OPTIONS:-}" ]; then export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"; fi
# mpirun's own options (-x NAME) may come before the binary; WEFT_MPIRUN_OPTIONS adds more
# (split at spaces: --enable-recovery, say).
read -r -a mpirun_options <<<"${WEFT_MPIRUN_OPTIONS:-}"
while [ "${1:-}" = "-x" ]; do
  mpirun_options+=("$1" "$2")
  shift 2
done
binary=$1
shift
exec timeout --kill-after=10 "${WEFT_MPIRUN_TIMEOUT:-240}" \
  mpirun -np "${WEFT_MPIRUN_NP:-2}" --allow-run-as-root --oversubscribe --bind-to none \
  -x WEFT_CPU_WORKERS="${WEFT_CPU_WORKERS:-1}" "${mpirun_options[@]}" "$binary" "$@"
