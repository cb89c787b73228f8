// Helpers for CPU operator kernels: intra-op parallelism sized so that engine workers times
// intra-op threads does not exceed the cores, output requests, and shape checks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/shape.h"
#include "core/tensor_view.h"
#include "ops/op.h"

namespace weft::cpu {

// Threads each op may use inside itself: WEFT_CPU_OP_THREADS, by default the cores divided by
// the engine's CPU workers (at least 1).
int IntraOpThreads();

// Runs f(begin, end) over [0, n) in chunks of at least `grain`, on IntraOpThreads() threads.
void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

// Sets the calling thread's OpenMP thread count (oneDNN's runtime in Debian's build) to
// IntraOpThreads(); cheap after the first call on a thread.
void ConfigureOpenMPForThisThread();

// Stores `value` into `out` as the request says.
template <typename T>
inline void Store(T& out, OpReq req, T value) {
  if (req == OpReq::kAddTo) {
    out += value;
  } else if (req != OpReq::kNull) {
    out = value;
  }
}

// Where a kernel writes its outputs, and how each result then reaches its output as the request
// says. The kernel overwrites Target(i) with output i. Outputs with req kWrite, and kWriteInplace
// when the kernel tolerates its output aliasing an input (`inplace_ok`), are their own target;
// the others get scratch memory: Finish() adds a kAddTo result to what the output holds, copies an
// aliasing kWriteInplace result, and drops a kNull one (so a kernel that computes several outputs
// at once need not special-case the ones nobody wants). The workspace is requested once for the
// scratch and for `extra_bytes` (the kernel's own temporaries, Extra(j)), because ctx.Workspace
// keeps only its latest buffer valid. Every part is 64-byte aligned.
//
//   StagedOutputs out(ctx, req, outputs, /*inplace_ok=*/false, {tmp_bytes});
//   Kernel(in, out.Target(0).data<float>(), out.Extra(0));
//   out.Finish();
class StagedOutputs {
 public:
  StagedOutputs(const OpContext& ctx, std::span<const OpReq> req, std::span<const TensorView> outputs,
                bool inplace_ok, std::initializer_list<size_t> extra_bytes = {});
  const TensorView& Target(int i) const { return targets_[i]; }
  // Whether anyone reads output i (its req is not kNull).
  bool Needed(int i) const { return req_[i] != OpReq::kNull; }
  void* Extra(int j) const { return extras_[j]; }
  void Finish() const;

 private:
  std::span<const OpReq> req_;
  std::span<const TensorView> outputs_;
  std::vector<TensorView> targets_;
  std::vector<void*> extras_;
};

// log(sum_i exp(x[i * stride])) over n >= 1 values; the largest value is subtracted before exp,
// so large logits do not overflow.
template <typename T>
T LogSumExp(const T* x, int64_t n, int64_t stride) {
  T max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i * stride]);
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i * stride] - max);
  return max + std::log(sum);
}

// Shape helpers for shape inference.
void CheckNumInputs(const std::vector<Shape>& in, size_t n, const char* op);
void CheckSameShape(const Shape& a, const Shape& b, const char* what);

}  // namespace weft::cpu
