#!/usr/bin/env bash
# Builds weft's GPU tests, examples and benchmarks (--config=cuda, optimized) and gathers them
# into gpu_bundle/ (git-ignored), laid out by tools/bundle_layout.sh: a wrapper per binary in
# gpu_bundle/bin/ that runs from any folder and in any order, with weft's shared libraries and
# those a GPU machine may lack (oneDNN, the OpenCL loader, libgomp, CUPTI; the CUDA, cuDNN and
# cuBLAS libraries are expected there), Open MPI's launcher (bin/mpirun, tools/mpi_bundle.sh), the
# data and peer scripts the binaries find beside themselves, and gpu_bundle/run_tests.sh, which
# runs every GPU test and ends with "N passed, N failed".
#
# Its size: one call to the GPU machine carries at most 64 MiB, the working tree and the bundle (a
# carried path) together. The bundle gets 48 MiB of it, 16 MiB staying for the tree: this script
# fails, saying so, when the bundle is larger, or when bundle and tree together pass 64 MiB. It
# was 188 MB with a static copy of weft in each of some thirty binaries, and is about 37 MB:
# - weft is linked dynamically (--dynamic_mode=fully): each of its libraries is one shared library
#   in lib/ that every binary loads, so a new test adds only its own code and its static
#   GoogleTest (about 0.5 MB);
# - executables are stripped, weft's libraries keep only their dynamic symbols, and the
#   libraries over 1 MiB (oneDNN, CUPTI, weft's CPU operators) and Open MPI are xz-compressed,
#   unpacked on first use.
# `du -sb gpu_bundle` measures it; running the bundle unpacks those files in place (oneDNN alone
# is 40 MB), so carry a fresh one.
#
#   tools/gpu_bundle.sh                 # here (needs the CUDA toolkit, no GPU)
#   gpu_bundle/run_tests.sh             # there, from any folder
#   gpu_bundle/run_tests_parallel.sh /tmp/o 7 460   # the same, 7 at a time (tools/gpu_parallel_tests.sh)
#   gpu_bundle/run_tests.sh --sanitize  # the same under compute-sanitizer (memcheck, racecheck, synccheck),
#                                       # leaving out the tests that provoke CUDA errors on purpose;
#                                       # --sanitize bin/gpu_rnn_test ...: only those binaries
#   gpu_bundle/bin/gpu_bench            # PyTorch: the first python3 on PATH that imports torch, or WEFT_PEER_PYTHON
#   gpu_bundle/bin/onnx_bench --device=gpu --big_batch=128   # imported models against PyTorch, torch.compile, ORT
set -euo pipefail
cd "$(dirname "$0")/.."

out=gpu_bundle
flags=(--config=cuda --config=opt --dynamic_mode=fully)
tests=$(bazel query 'attr(tags, "\bgpu\b", tests(//tests/...))' 2>/dev/null | grep -v gpu_examples_test)
extras=(//examples:train_mlp //examples:train_cnn //examples:train_lstm //examples:embed_infer //tests:dist_mpi_test_bin)
for t in //bench:gpu_bench //bench:dist_bench //bench:onnx_bench; do
  bazel query "$t" >/dev/null 2>&1 && extras+=("$t")
done
bazel build "${flags[@]}" $tests "${extras[@]}"

bin=$(bazel info "${flags[@]}" bazel-bin 2>/dev/null)
binaries=(tests/gpu_examples_test.sh)
for t in $tests "${extras[@]}"; do
  binaries+=("$bin/$(echo "${t#//}" | tr ':' '/')")
done
# Each test's env attribute, which `bazel test` would set, as --env=NAME:KEY=VALUE.
test_envs=()
while IFS= read -r line; do test_envs+=("--env=$line"); done < <(
  bazel query --output=build 'attr(tags, "\bgpu\b", tests(//tests/...))' 2>/dev/null | python3 -c '
import ast, re, sys
for block in sys.stdin.read().split("\n)\n"):
    name = re.search(r"^  name = \"([^\"]+)\"", block, re.M)
    env = re.search(r"^  env = (\{.*\}),$", block, re.M)
    if name and env:
        for k, v in ast.literal_eval(env.group(1)).items():
            print(f"{name.group(1)}:{k}={v}")')
rm -rf "$out"
onnx_data=()
for f in tests/onnx/*.onnx tests/onnx/*.json tests/onnx/*.data tests/onnx/export_models.py; do onnx_data+=("--data=$f"); done
tools/bundle_layout.sh "$out" --data=examples/data/digits.csv --data=bench/peer_common.py --data=bench/torch_gpu_peer.py --data=bench/torch_dist_peer.py --data=bench/torch_onnx_peer.py "${onnx_data[@]}" "${test_envs[@]}" "${binaries[@]}"
cp examples/data/digits.csv "$out/"
tools/mpi_bundle.sh "$out"  # bin/mpirun: the GPU machine has no Open MPI

cat >"$out/run_tests.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test binary of this bundle, from any folder; ends with "N passed, N failed".
# --sanitize: each under compute-sanitizer's memcheck, racecheck and synccheck tools instead.
cd "$(dirname "$(readlink -f "$0")")"
source libexec/env.sh || exit 1
# Tests run in their runfiles root, as under bazel test (they open tests/onnx/... from there).
here=$PWD
tests_at=(env -C libexec/runfiles/weft)
passed=0 failed=0
# run NAME COMMAND...: one result.
run() {
  local name=$1
  shift
  echo "== $name"
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $name"; fi
}
# racecheck's memory grows over a process (gpu_rnn_test's tests in one process reached 130 GB and
# the OOM killer), so under racecheck each test runs in a process of its own.
# Known, not ours: racecheck (2025.3.1) reports a hazard between two shared-memory accesses of
# cuBLAS's Hopper GEMM nvjet_sm90_tst_64x8_64x16_4x2_h_bz_NNT, which cuDNN's bfloat16 RNN calls
# (gpu_rnn_test's BFloat16 test: 4 reports of 96 hazards). Shared memory is the kernel's alone, so
# no stream order of weft's can reach it, and PyTorch 2.11's own bfloat16 nn.LSTM, nn.GRU and
# nn.RNN on the test's shapes, over its own cuDNN 9.19 and cuBLASLt, get the same 4 reports at the
# same offsets (+0xb00 read, +0x2820 write) under racecheck on the H200. Leaving the kernel out
# (--kernel-name-exclude) makes the sanitizer fail with an internal error at the next launch, so
# it stays in, and fails the run.
# Known, not ours: cuDNN's fused attention backward (cudnn_generated_fort_native_sdpa_sm90_flash_
# bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1) gets racecheck hazards on shared memory and
# synccheck "Barrier error detected. Divergent thread(s) in block" (after which cuDNN's execute
# fails, CUDNN_STATUS_EXECUTION_FAILED_CUDART). PyTorch 2.11's SDPA on its cuDNN backend (cuDNN
# 9.19) gets the same reports in the same kernel on an H200: tools/cudnn_sdpa_repro.py, run under
# compute-sanitizer there. So racecheck and synccheck run with cuDNN's attention off
# (WEFT_GPU_CUDNN_ATTENTION=0: weft's own attention kernels take those shapes and are checked);
# memcheck runs with it on, and is clean.
# sanitize BINARY: under memcheck, racecheck and synccheck. Tests that make CUDA calls fail on
# purpose (error propagation, out of memory) would be reported as API errors; they run in the
# plain pass. The sanitizer runs the binary itself.
sanitize() {
  local exe=$here/libexec/${1#bin/} skip='*CudaError*:*OutOfMemory*'
  run "compute-sanitizer --tool memcheck $1" "${tests_at[@]}" timeout 600 compute-sanitizer --tool memcheck \
    --error-exitcode 1 "$exe" --gtest_brief=1 --gtest_filter="-$skip"
  run "compute-sanitizer --tool synccheck $1" env WEFT_GPU_CUDNN_ATTENTION=0 "${tests_at[@]}" timeout 600 \
    compute-sanitizer --tool synccheck --error-exitcode 1 "$exe" --gtest_brief=1 \
    --gtest_filter="-$skip"
  local suite= line
  while IFS= read -r line; do
    case $line in
      " "*) ;;
      *) suite=${line%%#*}; suite=${suite%% *}; continue ;;
    esac
    line=${line#  }; line=${line%%#*}; line=${line%% *}
    # The RNN seed test's 1,000 runs take longer than the limit under racecheck: 20 there.
    run "compute-sanitizer --tool racecheck $1 $suite$line" env WEFT_TEST_RNN_SEED_RUNS=20 \
      WEFT_GPU_CUDNN_ATTENTION=0 "${tests_at[@]}" timeout 600 \
      compute-sanitizer --tool racecheck \
      --error-exitcode 1 "$exe" --gtest_brief=1 --gtest_filter="$suite$line:-$skip" </dev/null
  done < <("$exe" --gtest_list_tests --gtest_filter="-$skip" | grep -v '^Note')
}
sanitizing=0
if [ "${1:-}" = "--sanitize" ]; then
  sanitizing=1
  shift
  # --sanitize [BINARY...]: the named ones (bin/gpu_rnn_test ...), else every GPU test.
  targets=("$@")
  [ $# -gt 0 ] || targets=(bin/gpu_*_test)
  for t in "${targets[@]}"; do sanitize "$t"; done
else
  for t in bin/gpu_*_test; do
    run "$t" "${tests_at[@]}" timeout 450 "$here/$t" --gtest_brief=1  # the fusion property test takes about 330 s on the H200
  done
fi
if [ "$sanitizing" = 0 ]; then
  run bin/gpu_examples_test.sh \
    timeout 300 bin/gpu_examples_test.sh bin/train_mlp bin/train_cnn bin/embed_infer digits.csv
  # Kernel launch batching off: every kernel goes straight to its stream.
  for t in bin/gpu_launch_batch_test bin/gpu_ops_tensor_test; do
    run "WEFT_GPU_LAUNCH_BATCH=0 $t" env WEFT_GPU_LAUNCH_BATCH=0 "${tests_at[@]}" timeout 300 \
      "$here/$t" --gtest_brief=1
  done
  # CPU ranks over MPI on this machine too, through the bundle's own Open MPI launcher.
  run "mpirun -np 2 bin/dist_mpi_test_bin" timeout 300 bin/mpirun -np 2 --allow-run-as-root --oversubscribe \
    --bind-to none -x WEFT_CPU_WORKERS=4 bin/dist_mpi_test_bin --gtest_brief=1
fi
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
RUN
chmod +x "$out/run_tests.sh"
cp tools/gpu_parallel_tests.sh "$out/run_tests_parallel.sh"
du -sh "$out"/* "$out"/lib/* 2>/dev/null | sort -h | tail -n 12

# What one call to the GPU machine carries: the bundle, and the working tree (tracked files and
# untracked ones git does not ignore). The bundle's budget leaves room for the tree to grow.
mib=$((1024 * 1024))
budget=$((48 * mib)) call=$((64 * mib))
size=$(du -sb "$out" | cut -f1)
tree=$(git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null |
  tail -n 1 | cut -f1) || true
echo "gpu_bundle: $size bytes ($((size / mib)) MiB) of its $((budget / mib)) MiB; with the" \
  "working tree's $tree bytes, $((size + tree)) of the $((call / mib)) MiB one GPU call carries"
if [ "$size" -gt "$budget" ] || [ $((size + tree)) -gt "$call" ]; then
  echo "tools/gpu_bundle.sh: gpu_bundle/ is too large to carry to the GPU machine: $size bytes," \
    "budget $budget (64 MiB a call, 16 MiB of it kept for the working tree). See this script's" \
    "header for what keeps it small; du -sb gpu_bundle/* says what grew." >&2
  exit 1
fi
