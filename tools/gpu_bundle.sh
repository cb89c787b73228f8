#!/usr/bin/env bash
# Builds weft's GPU tests, examples and benchmarks (--config=cuda, optimized, statically linked
# weft code) and gathers them into gpu_bundle/ (git-ignored) with the shared libraries a GPU
# machine may lack (oneDNN, oneTBB, OpenCL loader, GoogleTest, ... ; the CUDA, cuDNN and cuBLAS
# libraries are expected there), plus gpu_bundle/run_tests.sh, which runs every GPU test there and
# ends with "N passed, N failed".
#
#   tools/gpu_bundle.sh                 # here (needs the CUDA toolkit, no GPU)
#   gpu_bundle/run_tests.sh             # there, from the repository root
#   gpu_bundle/run_tests.sh --sanitize  # the same under compute-sanitizer (memcheck, racecheck, synccheck),
#                                       # leaving out the tests that provoke CUDA errors on purpose
set -euo pipefail
cd "$(dirname "$0")/.."

out=gpu_bundle
flags=(--config=cuda --config=opt --dynamic_mode=off)
tests=$(bazel query 'attr(tags, "\bgpu\b", tests(//tests/...))' 2>/dev/null)
extras=(//examples:train_mlp //examples:train_cnn //examples:embed_infer)
for t in //bench:gpu_bench; do
  bazel query "$t" >/dev/null 2>&1 && extras+=("$t")
done
bazel build "${flags[@]}" $tests "${extras[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for t in $(echo $tests | tr ' ' '\n' | grep -v gpu_examples_test) "${extras[@]}"; do
  path="bazel-bin/$(echo "${t#//}" | tr ':' '/')"
  cp "$path" "$out/bin/"
  chmod u+w "$out/bin/$(basename "$path")"
  strip --strip-debug "$out/bin/$(basename "$path")"
done
cp examples/data/digits.csv "$out/"
cp tests/gpu_examples_test.sh "$out/bin/"

# Shared libraries that are neither the C runtime nor the CUDA toolkit's.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libstdc\+\+|libgcc_s|libcuda|libcudart|libnvrtc|libcublas|libcudnn|libnvJitLink)'
for bin in "$out"/bin/*; do
  { ldd "$bin" 2>/dev/null || true; } | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if [[ ! "$name" =~ $skip ]]; then cp -L "$path" "$out/lib/$name"; fi
done
xz -T2 -6 "$out"/lib/libdnnl.so.* 2>/dev/null || true

cat > "$out/run_tests.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test binary of this bundle; ends with "N passed, N failed".
# --sanitize: each under compute-sanitizer's memcheck, racecheck and synccheck tools instead.
cd "$(dirname "$0")"
for f in lib/*.xz; do [ -e "$f" ] && xz -dkf "$f"; done
export LD_LIBRARY_PATH="$PWD/lib:${LD_LIBRARY_PATH:-}"
passed=0 failed=0
for t in bin/gpu_*_test bin/gpu_examples_test.sh; do
  if [ "$t" = bin/gpu_examples_test.sh ]; then
    [ "${1:-}" = "--sanitize" ] && continue
    echo "== $t"
    if timeout 300 "$t" bin/train_mlp bin/train_cnn bin/embed_infer digits.csv; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $t"; fi
    continue
  fi
  if [ "${1:-}" = "--sanitize" ]; then
    for tool in memcheck racecheck synccheck; do
      echo "== compute-sanitizer --tool $tool $t"
      # Tests that make CUDA calls fail on purpose (error propagation, out of memory) would be
      # reported as API errors; they run in the plain pass.
      if timeout 600 compute-sanitizer --tool "$tool" --error-exitcode 1 "$t" --gtest_brief=1 \
          --gtest_filter='-*CudaError*:*OutOfMemory*'; then
        passed=$((passed + 1))
      else
        failed=$((failed + 1)); echo "FAILED: $tool $t"
      fi
    done
  else
    echo "== $t"
    if timeout 300 "$t" --gtest_brief=1; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $t"; fi
  fi
done
if [ "${1:-}" != "--sanitize" ]; then
  # Kernel launch batching off: every kernel goes straight to its stream.
  for t in bin/gpu_launch_batch_test bin/gpu_ops_tensor_test; do
    echo "== WEFT_GPU_LAUNCH_BATCH=0 $t"
    if WEFT_GPU_LAUNCH_BATCH=0 timeout 300 "$t" --gtest_brief=1; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAILED: $t"; fi
  done
fi
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
RUN
chmod +x "$out/run_tests.sh"
du -sh "$out" "$out"/bin/* "$out"/lib/* | sort -h | tail -n 30
