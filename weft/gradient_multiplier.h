// The factor by which every update multiplies its gradient (the update ops' scale input): gradient
// clipping by global norm and the dynamic loss scaler's unscaling (trainer.h states both rules),
// written once over how an op is applied, so that the bound step (graph nodes after the gradient
// pass) and a data-parallel step (imperative calls after the all-reduces) compute it by the same
// ops in the same order, and give the same bits. Internal to weft/trainer*.cc.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/attrs.h"

namespace weft::internal {

// The trainer's arguments that hold the loss scaler's state (float32, shape (1,) each).
inline constexpr char kLossScaleName[] = "trainer.loss_scale";
inline constexpr char kCleanStepsName[] = "trainer.loss_scale_clean_steps";

// Keeps the clip's scale finite for a zero gradient, as torch.nn.utils.clip_grad_norm_ does.
inline constexpr double kClipEpsilon = 1e-6;

// What the multiplier is made of: clipping to `clip` (> 0; 0: none) of gradients (of dtype
// `grads`) the updates multiply by `rescale`, and, with `scaler` (amp_update_scale's attributes),
// a loss scaler whose state is `scale` and `clean_steps`.
template <typename Value>
struct GradientScaling {
  double clip = 0, rescale = 1;
  const AttrMap* scaler = nullptr;
  Value scale{}, clean_steps{};
  DType grads = DType::kFloat32;
};

// With sumsq = sum_p sum(grads[p]^2) (one reduction over every gradient, also the scaler's
// all-finite check; float32): the scaler's m = 1 / scale, or NaN when sumsq is not finite (1
// without a scaler), and the multiplier m * min(1, clip / (rescale * m * sqrt(sumsq) + epsilon))
// (m without clipping). Nothing when there is neither clipping nor a scaler.
// apply(op, attrs, inputs, name, param) -> Value: one op on `inputs`; `name` names the node and
// `param` the parameter it serves (a graph's bookkeeping; imperative calls may ignore both).
template <typename Value, typename Apply>
std::optional<Value> GradientMultiplier(const std::map<std::string, Value>& grads,
                                        const GradientScaling<Value>& s, Apply apply) {
  if (s.clip <= 0 && s.scaler == nullptr) return std::nullopt;
  std::vector<Value> all;
  for (const auto& [p, g] : grads) all.push_back(g);
  const std::string& first = grads.begin()->first;  // the scalar nodes' owner
  const auto scalar_op = [&](const char* op, double value, Value x, const std::string& name) {
    return apply(op, AttrMap{{"scalar", FloatAttr(value)}}, {x}, name, first);
  };
  // every gradient's sum of squares by one op (a few launches on the GPU), then their sum
  Value x = apply("multi_sum_sq", AttrMap{{"num_args", std::to_string(all.size())}}, all,
                  "grad_sumsq_each", first);
  // float32 from here on, whatever the gradients' dtype (a pure bfloat16 model's sums are
  // bfloat16): the scaler and the updates read a float32 multiplier
  if (s.grads != DType::kFloat32)
    x = apply("Cast", AttrMap{{"dtype", "float32"}}, {x}, "grad_sumsq_each_f32", first);
  const Value sumsq = apply("sum", AttrMap{}, {x}, "grad_sumsq", first);
  std::optional<Value> m;
  if (s.scaler != nullptr) {
    m = apply("amp_update_scale", *s.scaler, {sumsq, s.scale, s.clean_steps}, "loss_scale_update",
              first);
  }
  if (s.clip <= 0) return m;
  x = scalar_op("mul_scalar", s.rescale, apply("sqrt", AttrMap{}, {sumsq}, "grad_root", first),
                "grad_norm");
  if (m) x = apply("mul", AttrMap{}, {x, *m}, "grad_norm_unscaled", first);
  x = scalar_op("add_scalar", kClipEpsilon, x, "grad_norm_eps");
  x = scalar_op("minimum_scalar", 1, scalar_op("rdiv_scalar", s.clip, x, "grad_clip_ratio"),
                "grad_clip_scale");
  if (m) x = apply("mul", AttrMap{}, {x, *m}, "grad_multiplier", first);
  return x;
}

}  // namespace weft::internal
