// Helpers for CPU operator kernels: intra-op parallelism sized so that engine workers times
// intra-op threads does not exceed the cores, output requests, and shape checks.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
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

// Stores in[0, n) into out[0, n) as the request says. A kWriteInplace onto the same memory is
// already done; the ranges must not overlap otherwise.
template <typename T>
inline void StoreN(T* out, OpReq req, const T* in, int64_t n) {
  if (req == OpReq::kNull || (req == OpReq::kWriteInplace && out == in)) return;
  if (req == OpReq::kAddTo) {
    for (int64_t i = 0; i < n; ++i) out[i] += in[i];
  } else {
    std::copy(in, in + n, out);
  }
}

// The gradient rule of an op `op` whose backward op `_backward_<op>` takes (the gradient of
// output 0, forward input 0) and the forward attributes, and gives the gradient of forward input
// `input` (the other inputs get none).
GradientFn GradientFromBackwardOp(const std::string& op, int input = 0);

// Shape helpers for shape inference.
void CheckNumInputs(const std::vector<Shape>& in, size_t n, const char* op);
void CheckSameShape(const Shape& a, const Shape& b, const char* what);

// Normalizes an axis of an op's attribute: `axis` + `ndim` when negative. Throws a weft::Error
// naming `op` and `shape` unless -ndim <= axis < ndim. (expand_dims passes ndim + 1.)
int NormalizeAxis(const std::string& op, int64_t axis, int ndim, const Shape& shape);

// Row-major strides of `shape`, in elements.
std::array<int64_t, Shape::kMaxDims> Strides(const Shape& shape);

// A tuple attribute as users write it, for error messages: "(4, -1)", "(5,)".
std::string FormatTuple(const std::vector<int64_t>& values);

}  // namespace weft::cpu
