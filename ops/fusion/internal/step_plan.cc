#include "ops/fusion/internal/step_plan.h"

#include <algorithm>

#include "core/error.h"
#include "core/small_vector.h"
#include "ops/invocation.h"

namespace weft {

namespace {

bool IsReshape(const FusedGroup::Step& s) {
  return s.op->pointwise.kind == PointwiseKind::kReshape;
}

// For each value, the last live step that reads it (-1: none), counting a reshape's reads of its
// alias as reads of the aliased value; `kEnd` for values an output copies at the end.
constexpr int kEnd = 1 << 30;

}  // namespace

StepPlan::StepPlan(const FusedGroup& group, Device device, std::span<const OpReq> out_req)
    : group_(group), out_req_(out_req.begin(), out_req.end()) {
  WEFT_CHECK_EQ(out_req.size(), group.outputs.size()) << group.label << ": output requests";
  const std::vector<bool> live = group.LiveSteps(out_req);
  std::vector<int> last_read(group.num_values(), -1);
  for (size_t s = 0; s < group.steps.size(); ++s) {
    if (!live[s]) continue;  // never runs, so reads nothing
    for (uint32_t a : group.steps[s].args) last_read[a] = static_cast<int>(s);
  }
  AssignHomes(last_read);
  for (auto [value, output] : at_end_) last_read[value] = kEnd;
  for (size_t s = group.steps.size(); s-- > 0;) {  // an alias keeps its source alive
    const FusedGroup::Step& step = group.steps[s];
    if (home_[step.first_output] == Home::kAlias) {
      last_read[step.args[0]] = std::max(last_read[step.args[0]], last_read[step.first_output]);
    }
  }
  AssignSlots(last_read);
  for (const FusedGroup::Step& step : group.steps)
    compute_.push_back(&ComputeFor(*step.op, device));
  for (size_t s = 0; s < req_.size(); ++s) {
    runs_.push_back(live[s] && std::any_of(req_[s].begin(), req_[s].end(),
                                           [](OpReq r) { return r != OpReq::kNull; }));
  }
  copy_ = &ComputeFor(GetOp("_copy"), device);
  IndexBroadcastUses();
}

void StepPlan::AssignHomes(const std::vector<int>& last_read) {
  const FusedGroup& g = group_;
  const std::vector<int> out_index = g.OutputIndex();
  home_.assign(g.num_values(), Home::kInput);
  for (const FusedGroup::Step& step : g.steps) {
    req_.emplace_back();
    for (uint32_t v = step.first_output; v < step.first_output + step.num_outputs; ++v) {
      const bool read = last_read[v] >= 0;
      const int k = out_index[v];
      const OpReq r = k < 0 ? OpReq::kNull : AsWrite(out_req_[k]);
      Home home;
      if (IsReshape(step) && read) {
        home = Home::kAlias;  // its readers read the source; an output gets a copy at the end
        if (r != OpReq::kNull) at_end_.emplace_back(v, k);
      } else if (r == OpReq::kNull) {
        home = read ? Home::kScratch : Home::kUnused;
      } else if (r == OpReq::kAddTo && read) {
        home = Home::kScratch;  // later steps read the value, not the sum
        at_end_.emplace_back(v, k);
      } else {
        home = Home::kOutput;
      }
      home_[v] = home;
      req_.back().push_back(home == Home::kOutput    ? r
                            : home == Home::kScratch ? OpReq::kWrite
                                                     : OpReq::kNull);
    }
  }
}

// Slots by first fit in step order: a step's outputs never share a slot with its own arguments
// (those are freed after it), so no op runs in place on a slot.
void StepPlan::AssignSlots(const std::vector<int>& last_read) {
  slot_.assign(group_.num_values(), -1);
  std::vector<int> free_slots;
  std::vector<std::vector<uint32_t>> dies(group_.steps.size());  // values whose last read is step s
  for (uint32_t v = group_.num_inputs; v < group_.num_values(); ++v) {
    if (home_[v] == Home::kScratch && last_read[v] >= 0 && last_read[v] != kEnd)
      dies[last_read[v]].push_back(v);
  }
  for (size_t s = 0; s < group_.steps.size(); ++s) {
    const FusedGroup::Step& step = group_.steps[s];
    for (uint32_t v = step.first_output; v < step.first_output + step.num_outputs; ++v) {
      if (home_[v] != Home::kScratch) continue;
      if (free_slots.empty()) {
        slot_[v] = num_slots_++;
      } else {
        slot_[v] = free_slots.back();
        free_slots.pop_back();
      }
    }
    for (uint32_t v : dies[s]) free_slots.push_back(slot_[v]);
  }
}

void StepPlan::IndexBroadcastUses() {
  const std::vector<FusedGroup::InputKind> kinds = group_.InputKinds();
  for (size_t s = 0; s < group_.steps.size(); ++s) {
    const FusedGroup::Step& step = group_.steps[s];
    arg_offset_.push_back(static_cast<uint32_t>(broadcast_use_of_.size()));
    for (size_t a = 0; a < step.args.size(); ++a) {
      const uint32_t v = step.args[a];
      const bool broadcast = v < group_.num_inputs && kinds[v] == FusedGroup::InputKind::kBroadcast;
      broadcast_use_of_.push_back(broadcast ? static_cast<int>(broadcast_uses_.size()) : -1);
      if (broadcast)
        broadcast_uses_.push_back({static_cast<uint32_t>(s), static_cast<uint32_t>(a), v});
    }
  }
}

void StepPlan::Run(const OpContext& ctx, Layout layout, std::vector<TensorView>& values,
                   std::span<const TensorView> outputs,
                   std::span<const TensorView> broadcast) const {
  Begin(values, outputs);
  for (size_t s = 0; s < group_.steps.size(); ++s) RunStep(ctx, s, layout, values, broadcast);
  End(ctx, values, outputs);
}

void StepPlan::Begin(std::vector<TensorView>& values, std::span<const TensorView> outputs) const {
  for (size_t k = 0; k < group_.outputs.size(); ++k) {
    if (home_[group_.outputs[k]] == Home::kOutput) values[group_.outputs[k]] = outputs[k];
  }
}

void StepPlan::RunStep(const OpContext& ctx, size_t s, Layout layout,
                       std::vector<TensorView>& values,
                       std::span<const TensorView> broadcast) const {
  const FusedGroup::Step& step = group_.steps[s];
  const uint32_t v0 = step.first_output;
  if (home_[v0] == Home::kAlias) {  // the same memory; whole tensors take the step's shape
    const TensorView& src = values[step.args[0]];
    values[v0] = layout == Layout::kTiles ? src : src.Reshaped(group_.shapes[v0]);
    return;
  }
  if (!runs_[s]) return;  // nothing reads any of its outputs
  SmallVector<TensorView, 4> in, out;
  for (size_t a = 0; a < step.args.size(); ++a) {
    const int use = broadcast.empty() ? -1 : broadcast_use_of_[arg_offset_[s] + a];
    in.push_back(use >= 0 ? broadcast[use] : values[step.args[a]]);
  }
  for (uint32_t o = 0; o < step.num_outputs; ++o) out.push_back(values[v0 + o]);
  (*compute_[s])(ctx, step.attrs, in.span(), req_[s], out.span());
}

void StepPlan::End(const OpContext& ctx, const std::vector<TensorView>& values,
                   std::span<const TensorView> outputs) const {
  for (auto [value, output] : at_end_) {
    const TensorView& dst = outputs[output];
    const OpReq r = AsWrite(out_req_[output]);
    const TensorView& src = values[value];
    (*copy_)(ctx, Attrs(), {&src, 1}, {&r, 1}, {&dst, 1});
  }
}

bool StepPlan::copied_at_end(uint32_t value) const {
  return std::any_of(at_end_.begin(), at_end_.end(),
                     [value](const auto& e) { return e.first == value; });
}

}  // namespace weft
