// Helpers for CPU operator kernels: intra-op parallelism sized so that engine workers times
// intra-op threads does not exceed the cores, output requests, and shape checks.
#pragma once

#include <cstdint>
#include <functional>
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
// Small ranges (and one thread) run inline, with no type erasure or allocation.
void ParallelForSplit(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f);
template <typename F>
inline void ParallelFor(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  if (n <= grain || IntraOpThreads() == 1) {
    f(int64_t{0}, n);
    return;
  }
  ParallelForSplit(n, grain, f);
}

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

// Shape helpers for shape inference.
void CheckNumInputs(const std::vector<Shape>& in, size_t n, const char* op);
void CheckSameShape(const Shape& a, const Shape& b, const char* what);

}  // namespace weft::cpu
