// The kernel of the optimizer updates: F is a functor of ops/math/optimizer.h (the CPU loops call
// the same one), applied in the arithmetic type of T (float for bf16 weights and state), so that
// results match the CPU's bit for bit.
#pragma once

#include "common.cuh"
#include "ops/math/optimizer.h"

namespace weft {

// y = F::Step(w, grad, state) with the F::kStates state arrays s0, s1 (null past kStates)
// updated in place, also when y is not wanted (req kReqNull), and copy (null: none) = the new
// weight rounded to C. n elements; y may be w. lr: F's rates on the device (p.lr_input: lr, then
// decay_rate), else null and p holds them. scale: the gradient's multiplier (p.scale_input), else
// null; when it is not finite nothing is written.
template <class F, typename T, typename C>
__global__ void Update(const T* w, const T* grad, T* s0, T* s1, T* y, C* copy, int64 n,
                       const double* lr, const float* scale, UpdateParam p, int req) {
  typedef typename Arith<T>::type A;
  if (lr != nullptr) fn::ReadRates<F>(lr, p);
  if (scale != nullptr && !fn::ReadScale(scale, p)) return;
  T* const state[fn::kMaxUpdateStates] = {s0, s1};
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    A s[fn::kMaxUpdateStates];
#pragma unroll
    for (int k = 0; k < F::kStates; ++k) s[k] = ToArith(state[k][i]);
    const A out = F::Step(p, ToArith(w[i]), ToArith(grad[i]), s);
#pragma unroll
    for (int k = 0; k < F::kStates; ++k) state[k][i] = FromArith<T>(s[k]);
    Store1(y + i, out, req);
    if (copy != nullptr) copy[i] = FromArith<C>(static_cast<typename Arith<C>::type>(out));
  }
}

// amp_update_scale: one thread advances the loss scaler (fn::UpdateLossScale) and writes the
// step's gradient multiplier to m (null: not wanted).
__global__ void UpdateLossScale(const float* sumsq, float* scale, float* clean, float* m,
                                fn::LossScaleParam p) {
  if (GlobalThread() != 0) return;
  const float multiplier = fn::UpdateLossScale(p, *sumsq, scale, clean);
  if (m != nullptr) *m = multiplier;
}

}  // namespace weft
