#!/usr/bin/env bash
# The GPU bundle's tests as run_tests.sh runs them (the examples, launch batching off, 2 MPI
# ranks), JOBS at once, the two longest tests as shards: on the 16-core GPU machine the whole set
# took 6 minutes unsharded (the fusion property test alone about 330 s) instead of run_tests.sh's
# sum; sharded it fits one call with room to spare. tools/gpu_bundle.sh copies it into the bundle
# as run_tests_parallel.sh.
#
#   gpu_bundle/run_tests_parallel.sh OUT JOBS TIMEOUT   # logs in OUT/logs/NAME.log, OUT/summary
#
# The tests that allocate most of the device or provoke device errors on purpose (gpu_storage,
# gpu_device_error*) run one after another beside the others. Prints "NAME rc=N SECONDS" per test,
# then the failure lines of each that failed.
cd "$(dirname "$(readlink -f "$0")")"
source libexec/env.sh || exit 1
out=$1 jobs=$2 to=$3
mkdir -p "$out/logs"
# Tests run in their runfiles root, as under bazel test (they open tests/onnx/... from there).
tests_at="env -C libexec/runfiles/weft"
# The two longest (about 330 s each beside the others) run as 4 GoogleTest shards each.
long="gpu_ops_fusion_property_test gpu_op_coverage_test" shards=4
{
  for t in bin/gpu_*_test; do
    case $t in bin/gpu_storage_test|bin/gpu_device_error_test|bin/gpu_device_error_naive_test) continue;; esac
    n=$(basename $t)
    if [[ " $long " == *" $n "* ]]; then
      for ((k = 0; k < shards; k++)); do
        echo "${n}_shard$k|env GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$k $tests_at $PWD/$t --gtest_brief=1"
      done
    else
      echo "$n|$tests_at $PWD/$t --gtest_brief=1"
    fi
  done
  echo "examples|bin/gpu_examples_test.sh bin/train_mlp bin/train_cnn bin/embed_infer digits.csv"
  echo "launch_batch0|env WEFT_GPU_LAUNCH_BATCH=0 $tests_at $PWD/bin/gpu_launch_batch_test --gtest_brief=1"
  echo "tensor_batch0|env WEFT_GPU_LAUNCH_BATCH=0 $tests_at $PWD/bin/gpu_ops_tensor_test --gtest_brief=1"
  echo "mpi|bin/mpirun -np 2 --allow-run-as-root --oversubscribe --bind-to none -x WEFT_CPU_WORKERS=4 bin/dist_mpi_test_bin --gtest_brief=1"
} > /tmp/jobs
# the shards of the longest first
sort -t'|' -k1,1 /tmp/jobs | awk -F'|' '$1 ~ /_shard/{print; next}{a[NR]=$0}END{for(i in a)print a[i]}' > /tmp/jobs2
export out to
one() {
  local name=${1%%|*} cmd=${1#*|} s=$(date +%s) rc
  timeout "$to" bash -c "$cmd" >"$out/logs/$name.log" 2>&1; rc=$?
  echo "$name rc=$rc $(( $(date +%s) - s ))s" >>"$out/summary"
}
export -f one
(for t in bin/gpu_storage_test bin/gpu_device_error_test bin/gpu_device_error_naive_test; do one "$(basename $t)|$tests_at $PWD/$t --gtest_brief=1"; done) &
tr '\n' '\0' </tmp/jobs2 | xargs -0 -P "$jobs" -I{} bash -c 'one "$1"' _ {}
wait
sort "$out/summary"
for f in "$out"/logs/*.log; do
  n=$(basename $f .log)
  grep -q "^$n rc=0 " "$out/summary" && continue
  echo "######## $n"; grep -E "FAILED|Failure|rror|Expected|Which is|actual|SKIP" "$f" | head -25
done
