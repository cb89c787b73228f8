// The trainer's gradient clipping by global norm (trainer.h states the rule), written once over how
// an op is applied, so that the bound step (graph nodes after the gradient pass) and a
// data-parallel step (imperative calls after the all-reduces) clip by the same ops in the same
// order, and give the same bits. Internal to weft/trainer*.cc.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "ops/attrs.h"

namespace weft::internal {

// Keeps the clip's scale finite for a zero gradient, as torch.nn.utils.clip_grad_norm_ does.
inline constexpr double kClipEpsilon = 1e-6;

// grads[p] *= min(1, clip / (rescale * sqrt(sum_p sum(grads[p]^2)) + epsilon)).
// apply(op, attrs, inputs, name, param) -> Value: one op on `inputs`; `name` names the node and
// `param` the parameter it serves (a graph's bookkeeping; imperative calls may ignore both).
template <typename Value, typename Apply>
void ClipByGlobalNorm(std::map<std::string, Value>& grads, double clip, double rescale,
                      Apply apply) {
  std::vector<Value> all;
  for (const auto& [p, g] : grads) all.push_back(g);
  const std::string& first = grads.begin()->first;  // the scalar nodes' owner
  const auto scalar_op = [&](const char* op, double value, Value x, const std::string& name) {
    return apply(op, AttrMap{{"scalar", FloatAttr(value)}}, {x}, name, first);
  };
  // every gradient's sum of squares by one op (a few launches on the GPU), then their sum
  Value x = apply("multi_sum_sq", AttrMap{{"num_args", std::to_string(all.size())}}, all,
                  "grad_sumsq_each", first);
  x = apply("sum", AttrMap{}, {x}, "grad_sumsq", first);
  x = scalar_op("mul_scalar", rescale, apply("sqrt", AttrMap{}, {x}, "grad_root", first),
                "grad_norm");
  x = scalar_op("add_scalar", kClipEpsilon, x, "grad_norm_eps");
  x = scalar_op("minimum_scalar", 1, scalar_op("rdiv_scalar", clip, x, "grad_clip_ratio"),
                "grad_clip_scale");
  for (auto& [p, g] : grads) g = apply("mul", AttrMap{}, {g, x}, p + "_grad_clipped", p);
}

}  // namespace weft::internal
