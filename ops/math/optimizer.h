// The math of the optimizer updates (ops/optimizer/update.cc defines the ops), written once for
// the CPU loops, the GPU kernels and the fusion code generator (ops/math/base.h says how), and
// their parameters, which the definitions parse into, both devices read with attrs.Get<P>(), and
// kernels take by value (plain doubles and one flag, laid out alike by both compilers).
//
// Each update rescales the gradient, clips it to [-clip_gradient, clip_gradient] when
// clip_gradient > 0, and adds weight decay wd * weight:
//   g = clip(rescale_grad * grad) + wd * weight
// then takes one step; AdamW decays the weight apart from the gradient instead (decoupled).
// F::Step(p, weight, grad, state) returns the new weight and updates the F::kStates values of
// state[] (momentum; Adam's mean and variance) in place, all in the arithmetic type A (float for
// float32 and bfloat16, double for float64). The order of operations is the contract: both devices
// run exactly this code, so their results agree bit for bit (Sqrt is correctly rounded on both). A
// NaN gradient stays NaN through the clip.
#pragma once

#include "ops/math/base.h"

namespace weft {

// The attributes of every update (each update parses those it takes; the others stay 0).
// With lr_input, the rates are not attributes but the update's last input, F::kRates float64
// elements (device scalars: a bound training step changes them without being rebound): lr, then
// for AdamW decay_rate. The computes read them into the parameters before calling the functor, so
// the functors below never see the difference.
struct UpdateParam {
  double lr, momentum, beta1, beta2, epsilon, wd, rescale_grad, clip_gradient;
  double decay_rate;  // AdamW: the rate of the decoupled decay (torch.optim.AdamW's lr)
  bool lr_input;
  // With scale_input, an input before the rates: a float32 multiplier of the gradient, computed on
  // the device (a loss scaler's 1 / scale, times the clipping's factor), folded into rescale_grad
  // by ReadScale; when it is not finite the update is skipped: it writes nothing (a step whose
  // gradients overflowed).
  bool scale_input;
  // With a copy (attribute `copy`: a dtype), a second output: the new weight rounded to that
  // dtype, written in the same pass (a mixed-precision step's 16-bit weights). The DType's value,
  // or -1 for none; kernels never read it.
  int copy;
};

}  // namespace weft

namespace weft::fn {

// The most state arrays an update keeps (the computes hold them in arrays of this size).
constexpr int kMaxUpdateStates = 2;

// clip(rescale_grad * grad).
template <typename A>
WEFT_HOST_DEVICE inline A ScaledGradient(const UpdateParam& p, A grad) {
  A g = static_cast<A>(p.rescale_grad) * grad;
  if (p.clip_gradient > 0) {
    const A c = static_cast<A>(p.clip_gradient);
    g = g > c ? c : (g < -c ? -c : g);
  }
  return g;
}

// clip(rescale_grad * grad) + wd * weight.
template <typename A>
WEFT_HOST_DEVICE inline A UpdateGradient(const UpdateParam& p, A grad, A weight) {
  return ScaledGradient(p, grad) + static_cast<A>(p.wd) * weight;
}

// The moments' step and Adam's move for gradient g: state {m, v}.
template <typename A>
WEFT_HOST_DEVICE inline A AdamMove(const UpdateParam& p, A g, A* state) {
  const A b1 = static_cast<A>(p.beta1), b2 = static_cast<A>(p.beta2);
  state[0] = b1 * state[0] + (A(1) - b1) * g;
  state[1] = b2 * state[1] + (A(1) - b2) * g * g;
  return static_cast<A>(p.lr) * state[0] / (math::Sqrt(state[1]) + static_cast<A>(p.epsilon));
}

// weight - lr * g.
struct SgdUpdate {
  static constexpr int kStates = 0, kRates = 1;
  template <typename A>
  WEFT_HOST_DEVICE static A Step(const UpdateParam& p, A weight, A grad, A*) {
    return weight - static_cast<A>(p.lr) * UpdateGradient(p, grad, weight);
  }
};

// mom = momentum * mom - lr * g; weight + mom. state: {mom}.
struct SgdMomUpdate {
  static constexpr int kStates = 1, kRates = 1;
  template <typename A>
  WEFT_HOST_DEVICE static A Step(const UpdateParam& p, A weight, A grad, A* state) {
    state[0] = static_cast<A>(p.momentum) * state[0] -
               static_cast<A>(p.lr) * UpdateGradient(p, grad, weight);
    return weight + state[0];
  }
};

// Adam without bias correction (the Adam optimizer folds it into lr, as in MXNet):
// m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2; weight - lr m / (sqrt(v) + epsilon).
// state: {m, v}.
struct AdamUpdate {
  static constexpr int kStates = 2, kRates = 1;
  template <typename A>
  WEFT_HOST_DEVICE static A Step(const UpdateParam& p, A weight, A grad, A* state) {
    return weight - AdamMove(p, UpdateGradient(p, grad, weight), state);
  }
};

// AdamW (Loshchilov and Hutter; torch.optim.AdamW): the weight decays apart from the gradient,
// at its own rate (the schedule's, without Adam's bias correction, which lr holds folded in):
// weight *= 1 - decay_rate * wd; then Adam's move with g = clip(rescale_grad * grad).
// state: {m, v}; rates: lr, decay_rate.
struct AdamWUpdate {
  static constexpr int kStates = 2, kRates = 2;
  template <typename A>
  WEFT_HOST_DEVICE static A Step(const UpdateParam& p, A weight, A grad, A* state) {
    const A decayed = weight * static_cast<A>(1 - p.decay_rate * p.wd);  // as PyTorch rounds it
    return decayed - AdamMove(p, ScaledGradient(p, grad), state);
  }
};

// Whether x is neither infinite nor NaN (NaN fails every comparison), written without isfinite
// so that the host, the GPU and the fusion code generator read it alike.
template <typename A>
WEFT_HOST_DEVICE inline bool IsFinite(A x) {
  return x - x == A(0);
}

// Reads the gradient multiplier (scale_input: on the weight's device) into p. Returns false when
// it is not finite: the update must then write nothing.
WEFT_HOST_DEVICE inline bool ReadScale(const float* scale, UpdateParam& p) {
  const float m = *scale;
  if (!IsFinite(m)) return false;
  p.rescale_grad *= static_cast<double>(m);
  return true;
}

// Reads update F's rates (lr_input: its last input, on the weight's device) into p.
template <class F>
WEFT_HOST_DEVICE inline void ReadRates(const double* rates, UpdateParam& p) {
  p.lr = rates[0];
  if (F::kRates > 1) p.decay_rate = rates[1];
}

// The dynamic loss scaler (amp_update_scale; weft::Trainer's loss scaling), as PyTorch's
// GradScaler: after a step whose gradients are all finite the count of clean steps grows, and at
// growth_interval of them the scale grows by growth_factor (to at most max_scale) and the count
// restarts; after a step with an overflow (a sum of squares of the gradients that is not finite)
// the scale shrinks by backoff_factor and the count restarts. Scale and count are float32 (exact
// up to 2^24 steps).
struct LossScaleParam {
  double growth_factor, backoff_factor, max_scale, growth_interval;
};

// Advances the scaler for a step with gradients' sum of squares `sumsq`, scaled by *scale.
// Returns the step's gradient multiplier: 1 / the scale it ran with, or NaN when it overflowed
// (so the updates reading it are skipped).
WEFT_HOST_DEVICE inline float UpdateLossScale(const LossScaleParam& p, float sumsq, float* scale,
                                              float* clean) {
  const float s = *scale;
  if (!IsFinite(sumsq)) {
    *scale = s * static_cast<float>(p.backoff_factor);
    *clean = 0;
    return sumsq - sumsq;  // NaN
  }
  *clean += 1;
  if (*clean >= static_cast<float>(p.growth_interval)) {
    const float grown = s * static_cast<float>(p.growth_factor);
    const float max = static_cast<float>(p.max_scale);
    *scale = grown < max ? grown : max;
    *clean = 0;
  }
  return 1.0f / s;
}

}  // namespace weft::fn
