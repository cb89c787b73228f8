// SoftmaxCrossEntropy (ops/gpu/softmax_cross_entropy.cc): one warp per row computes the row's
// maximum and sum of exponentials (in one pass: RowStats), then the loss -(x[label] - lse) and the
// row's lse = max + log(sum), which the op keeps for its backward; the gradient
// out_grad * (exp(x - lse) - onehot(label)) reads each row once. One launch each way, for arrays
// of T (float, double, bf16 or f16) computed in its arithmetic type (float for 16 bits), in packs
// of V values where the rows are whole 16-byte packs (else V 1); the loss, lse and out_grad in S,
// the statistics' type (float for 16 bits); labels in L (T, or float). A label
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
// them), in one pass over the row: lane l reads the packs of V values at (k * 32 + l) * V and
// keeps its running maximum and its sum scaled to it (online softmax: rescaled once a pack whose
// maximum is larger), and the lanes' pairs combine by rescaling to the larger maximum. A row whose
// maximum is infinite, or with a NaN, gets a NaN sum, as two passes give (the CPU's).
template <int V, typename T, typename A>
__device__ inline void RowStats(const T* x, int64 classes, int lane, A& max, A& sum) {
  A m = -static_cast<A>(__longlong_as_double(0x7ff0000000000000LL));  // -infinity
  A s = 0;
  for (int64 c = static_cast<int64>(lane) * V; c < classes; c += 32 * V) {
    A v[V];
    LoadN<V>(x + c, v);
    A pm = v[0];
#pragma unroll
    for (int e = 1; e < V; ++e) pm = v[e] > pm ? v[e] : pm;
    if (pm > m) {  // also where m is -infinity and pm is not: s is 0 then
      s = s == A(0) ? A(0) : s * Exp(m - pm);
      m = pm;
    }
#pragma unroll
    for (int e = 0; e < V; ++e) s += Exp(v[e] - m);
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

// loss[i] = -(x[i, label[i]] - lse[i]) (added to loss when accumulate) and lse[i] = max + log(sum),
// both in S, each where its request asks; rows of V-value packs.
template <typename T, typename S, typename L, int V>
__global__ void SceLoss(int64 n, int64 classes, const T* x, const L* label, int req_loss, S* loss,
                        int req_lse, S* lse, GpuErrorSlot bad) {
  typedef typename Arith<T>::type A;
  WEFT_FOR_EACH_WARP_ROW(i, n) {
    A max, sum;
    RowStats<V>(x + i * classes, classes, lane, max, sum);
    if (lane != 0) continue;
    const int64 c = ClassOf(label[i], classes);
    if (c < 0) NoteBadItem(bad, i);
    const A row_lse = max + Log(sum);
    typedef typename Arith<S>::type B;
    Store1(loss + i,
           static_cast<B>(c < 0 ? NotANumber<A>() : row_lse - ToArith(x[i * classes + c])),
           req_loss);
    Store1(lse + i, static_cast<B>(row_lse), req_lse);
  }
}

// dx[i, c] = dy[i] * (exp(x[i, c] - lse[i]) - (c == label[i])) (added to dx when accumulate): one
// read of x, a warp a row in V-value packs.
template <typename T, typename S, typename L, int V>
__global__ void SceGrad(int64 n, int64 classes, const S* dy, const T* x, const L* label,
                        const S* lse, int req, T* dx, GpuErrorSlot bad) {
  typedef typename Arith<T>::type A;
  WEFT_FOR_EACH_WARP_ROW(i, n) {
    const int64 label_class = ClassOf(label[i], classes);
    if (label_class < 0 && lane == 0) NoteBadItem(bad, i);
    const A g = static_cast<A>(ToArith(dy[i])), row_lse = static_cast<A>(ToArith(lse[i]));
    const T* row = x + i * classes;
#pragma unroll 4
    for (int64 c = static_cast<int64>(lane) * V; c < classes; c += 32 * V) {
      A v[V];
      LoadN<V>(row + c, v);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const A onehot = c + e == label_class ? A(1) : A(0);
        v[e] = label_class < 0 ? NotANumber<A>() : g * (Exp(v[e] - row_lse) - onehot);
      }
      StoreN<V>(dx + i * classes + c, v, req);
    }
  }
}

}  // namespace weft
