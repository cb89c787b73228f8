// Invocation: one call of an op as the engine runs it. Imperative calls (weft/imperative.cc) and
// bound graphs (executor/) both describe every op call with one, so they agree on what a call
// reads, writes and draws. It holds the op, its parsed attributes, the compute for the device,
// the input and output tensors with their engine vars and the output requests, and derives:
//   reads:  the var of every input the op does not mutate and reads the values of (not one it
//           reads for its shape or dtype only, Op::ReadsInputValues: no writer of it is waited
//           for);
//   writes: the var of every output whose request is not kNull, and of every input the op
//           mutates (Op::mutate_inputs: optimizer state), so later readers of that input wait;
//   random: how many 32-bit numbers the call draws (Op::random_draws), for the caller to
//           reserve at push (storage/random.h) and hand over in OpContext::random.
// An Invocation is a value: building one pushes nothing, and Run may be called from any thread
// while nothing modifies it.
//
//   Invocation call(op, attrs, Device::Cpu());     // throws: no compute for the device
//   call.AddInput(x.View(), x.var());
//   call.AddOutput(y.View(), y.var(), OpReq::kWrite);
//   ctx.random = ReserveRandom(call.device(), call.RandomDraws(ctx.is_train));
//   engine.PushSync([&](RunContext run) { ctx.run = run; call.Run(ctx); }, call.device(),
//   call.reads(), call.writes());
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/small_vector.h"
#include "core/tensor_view.h"
#include "engine/engine.h"
#include "ops/op.h"

namespace weft {

// The compute of `op` for `device`; throws weft::Error naming both when there is none.
const ComputeFn& ComputeFor(const Op& op, Device device);

class Invocation {
 public:
  Invocation() {}  // user-provided: a pooled record's inline storage is not zeroed first
  // A call of `op` with `attrs` (parsed for it) on `device`. Throws as ComputeFor does.
  Invocation(const Op& op, const Attrs& attrs, Device device);

  // Inputs, then outputs, in the op's order. (Inline: imperative calls build one per push.)
  void AddInput(const TensorView& view, engine::VarHandle var) {
    const size_t i = inputs_.size();
    if (Mutates(i)) {
      writes_.push_back(var);
    } else if (op_->ReadsInputValues(attrs_, static_cast<int>(i))) {
      reads_.push_back(var);
    }
    inputs_.push_back(view);
    input_vars_.push_back(var);
  }
  void AddOutput(const TensorView& view, engine::VarHandle var, OpReq req) {
    outputs_.push_back(view);
    req_.push_back(req);
    if (req != OpReq::kNull) writes_.push_back(var);
  }

  // The number of 32-bit random numbers this call draws: Op::random_draws for these inputs, 0
  // for an op that is not random. OpContext::random must hold a range of that many.
  uint64_t RandomDraws(bool is_train) const {
    return op_->IsRandom() ? op_->random_draws(attrs_, inputs_.span(), is_train) : 0;
  }
  // For a call whose tensors will not change (a bound graph's node): runs the op's bind-time
  // preparation for the device, if it has one, and from then on Run runs what it returned.
  // Call after the last AddOutput. Throws what the preparation throws.
  void Prepare();
  // Runs the compute on this call's tensors.
  void Run(const OpContext& ctx) const {
    (*compute_)(ctx, attrs_, inputs_.span(), req_.span(), outputs_.span());
  }

  const Op& op() const { return *op_; }
  const Attrs& attrs() const { return attrs_; }
  Device device() const { return device_; }
  std::span<const TensorView> inputs() const { return inputs_.span(); }
  std::span<const TensorView> outputs() const { return outputs_.span(); }
  std::span<const OpReq> req() const { return req_.span(); }
  std::span<const engine::VarHandle> reads() const { return reads_.span(); }
  std::span<const engine::VarHandle> input_vars() const { return input_vars_.span(); }  // per input
  std::span<const engine::VarHandle> writes() const { return writes_.span(); }

 private:
  bool Mutates(size_t input) const {
    const std::vector<int>& mutated = op_->mutate_inputs;
    return !mutated.empty() &&
           std::find(mutated.begin(), mutated.end(), static_cast<int>(input)) != mutated.end();
  }

  const Op* op_ = nullptr;
  const ComputeFn* compute_ = nullptr;
  std::shared_ptr<const ComputeFn> prepared_;  // what Prepare returned; compute_ points at it
  Attrs attrs_;
  Device device_;
  SmallVector<TensorView, 4> inputs_, outputs_;
  SmallVector<OpReq, 4> req_;
  SmallVector<engine::VarHandle, 4> reads_;
  SmallVector<engine::VarHandle, 4> writes_;
  SmallVector<engine::VarHandle, 4> input_vars_;
};

}  // namespace weft
