// Trainer's data-parallel part (TrainerOptions::communicator): the broadcast at the start, and
// each step's gradient all-reduces and the updates after them.
#include <algorithm>

#include "ops/op.h"
#include "weft/gradient_multiplier.h"
#include "weft/imperative.h"
#include "weft/trainer.h"

namespace weft {

// Backward makes the gradients roughly in reverse order of the parameters' first use, which is
// the loss's argument order; every rank computes the same buckets from the same graph.
void Trainer::PlanGradientBuckets(const Symbol& loss) {
  std::vector<std::string> order;
  for (const std::string& name : loss.ListArguments()) {
    if (grads_.count(name) != 0) order.push_back(name);
  }
  std::reverse(order.begin(), order.end());
  std::vector<size_t> bytes;
  for (const std::string& name : order) bytes.push_back(grads_.at(name).bytes());
  for (const std::vector<size_t>& bucket : dist::PlanBuckets(bytes, options_.bucket_bytes)) {
    std::vector<NDArray>& arrays = grad_buckets_.emplace_back();
    for (size_t i : bucket) arrays.push_back(grads_.at(order[i]));
  }
}

void Trainer::BroadcastParameters() const {
  for (const std::string& name : params_)
    options_.communicator->Broadcast(params_arrays_.at(name), /*root=*/0);
}

// The same multiplier ops (clipping, the loss scaler), update op, attributes and learning-rate
// array as the bound graph's: they read the averaged gradients, the same on every rank, so every
// rank gets the same multiplier (an overflow on one rank is an overflow on all: they all skip).
void Trainer::AllReduceAndUpdate() const {
  for (const std::vector<NDArray>& bucket : grad_buckets_) {
    options_.communicator->AllReduce(bucket, dist::ReduceOp::kAverage);
  }
  internal::GradientScaling<NDArray> scaling{options_.clip_global_norm, UpdateRescale()};
  scaling.grads = options_.dtype;
  if (!scaler_.empty()) {
    scaling.scaler = &scaler_attrs_;
    scaling.scale = scaler_.at(internal::kLossScaleName);
    scaling.clean_steps = scaler_.at(internal::kCleanStepsName);
  }
  const std::optional<NDArray> multiplier = internal::GradientMultiplier(
      grads_, scaling,
      [](const char* op, const AttrMap& attrs, std::vector<NDArray> inputs, const std::string&,
         const std::string&) { return Invoke(op, inputs, attrs)[0]; });
  const Op& op = GetOp(update_op_);
  for (const std::string& p : params_) {
    std::vector<NDArray> inputs = {params_arrays_.at(p), grads_.at(p)};
    for (const std::string& s : states_) inputs.push_back(state_arrays_.at(p + "." + s));
    if (multiplier) inputs.push_back(*multiplier);
    inputs.push_back(lr_);
    std::vector<NDArray> outputs = {params_arrays_.at(p)};
    if (const NDArray* copy = CopyOf(p)) outputs.push_back(*copy);
    InvokeInto(op, param_update_attrs_.at(p), inputs, outputs);
  }
}

}  // namespace weft
