// SoftmaxCrossEntropy (ops/gpu/softmax_cross_entropy.cc): one warp per row computes the row's
// maximum and sum of exponentials (in one pass: RowStats), then the loss -(x[label] - max -
// log(sum)), or the gradient out_grad * (softmax(x) - onehot(label)); one launch each way, for
// arrays of T (float, double or bf16) computed in its arithmetic type (float for bf16). A label
// that is not a class index in [0, classes) is noted in `bad` (its row), and the row's results
// are NaN; the op then fails (device_error.cuh).
#pragma once

#include "common.cuh"
#include "device_error.cuh"

namespace weft {

// `label` as a class index in [0, classes), or -1 when it is not one.
template <typename T>
__device__ inline int64 ClassOf(T label, int64 classes) {
  const double v = static_cast<double>(ToArith(label));
  return (v >= 0 && v < static_cast<double>(classes) && v == floor(v)) ? static_cast<int64>(v) : -1;
}

template <typename T>
__device__ inline T NotANumber() {
  return static_cast<T>(__longlong_as_double(0x7ff8000000000000LL));
}

// The maximum of row x and the sum of exp(x - max), in A, reduced over the warp (every lane gets
// them), in one pass over the row: each lane keeps its running maximum and its sum scaled to it
// (online softmax), and the lanes' pairs combine by rescaling to the larger maximum. A row of
// -infinity only, or with a NaN, gets a NaN sum, as two passes would give.
template <typename T, typename A>
__device__ inline void RowStats(const T* x, int64 classes, int lane, A& max, A& sum) {
  A m = -static_cast<A>(__longlong_as_double(0x7ff0000000000000LL));  // -infinity
  A s = 0;
  for (int64 c = lane; c < classes; c += 32) {
    const A v = ToArith(x[c]);
    if (v > m) {
      s = s * Exp(m - v) + A(1);
      m = v;
    } else {
      s += Exp(v - m);
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const A om = __shfl_xor_sync(0xffffffffu, m, offset);
    const A os = __shfl_xor_sync(0xffffffffu, s, offset);
    const A nm = om > m ? om : m;
    // A lane that saw nothing (sum 0) adds nothing, whatever its maximum.
    s = (s == A(0) ? A(0) : s * Exp(m - nm)) + (os == A(0) ? A(0) : os * Exp(om - nm));
    m = nm;
  }
  max = m;
  sum = s;
}

// The rows a warp handles: row, row + step, ... (every lane of a warp takes the same ones).
#define WEFT_FOR_EACH_WARP_ROW(row, n) \
  const int lane = threadIdx.x % 32;   \
  for (int64 row = GlobalThread() / 32; row < (n); row += GridThreads() / 32)

// loss[i] = -(x[i, label[i]] - max - log(sum)) (added to loss when accumulate).
template <typename T>
__global__ void SceLoss(int64 n, int64 classes, const T* x, const T* label, int accumulate, T* loss,
                        GpuErrorSlot bad) {
  typedef typename Arith<T>::type A;
  WEFT_FOR_EACH_WARP_ROW(i, n) {
    A max, sum;
    RowStats(x + i * classes, classes, lane, max, sum);
    if (lane != 0) continue;
    const int64 c = ClassOf(label[i], classes);
    if (c < 0) NoteBadItem(bad, i);
    const A v = c < 0 ? NotANumber<A>() : -(ToArith(x[i * classes + c]) - max - Log(sum));
    loss[i] = FromArith<T>(accumulate ? ToArith(loss[i]) + v : v);
  }
}

// dx[i, c] = dy[i] * (softmax(x)[i, c] - (c == label[i])) (added to dx when accumulate).
template <typename T>
__global__ void SceGrad(int64 n, int64 classes, const T* dy, const T* x, const T* label,
                        int accumulate, T* dx, GpuErrorSlot bad) {
  typedef typename Arith<T>::type A;
  WEFT_FOR_EACH_WARP_ROW(i, n) {
    A max, sum;
    const T* row = x + i * classes;
    RowStats(row, classes, lane, max, sum);
    const int64 label_class = ClassOf(label[i], classes);
    if (label_class < 0 && lane == 0) NoteBadItem(bad, i);
    const A g = ToArith(dy[i]);
    for (int64 c = lane; c < classes; c += 32) {
      const A p = Exp(static_cast<A>(ToArith(row[c])) - max) / sum;
      const A v = label_class < 0 ? NotANumber<A>() : g * (p - (c == label_class ? A(1) : A(0)));
      T& out = dx[i * classes + c];
      out = FromArith<T>(accumulate ? ToArith(out) + v : v);
    }
  }
}

}  // namespace weft
