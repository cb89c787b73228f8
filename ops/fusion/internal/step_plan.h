// StepPlan: a fused group run step by step through each op's own compute, for one set of output
// requests. The CPU runs it over tiles (every value a tile of the iteration space); the GPU runs it
// over whole tensors when its generated kernel cannot be used (the fallback). Built once per bound
// node; Run is const and may be called from several threads at once, each with its own views.
//
// Where each step output lives:
//   kOutput:  written straight into the fused node's output, with that output's request;
//   kScratch: in scratch memory (a slot, shared by values whose lifetimes do not overlap) when
//             no output holds it, or its output adds to what is there while later steps read the
//             value itself; Run then adds the slot into the output at the end;
//   kAlias:   a reshape step's output that no output holds: its argument's memory;
//   kUnused:  nothing reads it (its step is asked for kNull).
//
//   StepPlan plan(group, Device::Cpu(), req);
//   std::vector<TensorView> values(group.num_values());   // inputs, slots and unused bound
//   plan.Run(ctx, values, outputs, /*broadcast=*/{});
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/device.h"
#include "core/tensor_view.h"
#include "ops/fusion/fused_group.h"
#include "ops/op.h"

namespace weft {

class StepPlan {
 public:
  enum class Home : uint8_t { kInput, kOutput, kScratch, kAlias, kUnused };
  // A binary step's read of a broadcast input, in Run's `broadcast` views.
  struct BroadcastUse {
    uint32_t step, arg, input;
  };

  // `out_req`: one per output of the fused node. `group` must outlive the plan.
  StepPlan(const FusedGroup& group, Device device, std::span<const OpReq> out_req);

  const FusedGroup& group() const { return group_; }
  Home home(uint32_t value) const { return home_[value]; }
  int slot(uint32_t value) const { return slot_[value]; }  // for kScratch values, else -1
  int num_slots() const { return num_slots_; }
  const std::vector<BroadcastUse>& broadcast_uses() const { return broadcast_uses_; }
  // The index in broadcast_uses() of step `step`'s argument `arg`, or -1 (not a broadcast input).
  int broadcast_use(size_t step, size_t arg) const {
    return broadcast_use_of_[arg_offset_[step] + arg];
  }

  // Runs the steps. `values` holds a view of every input, of every kScratch value (its slot) and
  // of every kUnused value (any memory, null included: nothing is written; its shape and dtype
  // must be right); Run points the kOutput values at `outputs` (the fused node's, one per output)
  // and the kAlias ones at their source. `broadcast`: one view per broadcast use, replacing the
  // input's own view there (a CPU tile gathers them); empty to pass broadcast inputs as they are
  // (whole tensors, which the binary op broadcasts itself). `layout`: whether every view is a
  // flat tile (a reshape's alias is then its source's view) or a whole tensor of its value's shape.
  enum class Layout : uint8_t { kTiles, kWholeTensors };
  void Run(const OpContext& ctx, Layout layout, std::vector<TensorView>& values,
           std::span<const TensorView> outputs, std::span<const TensorView> broadcast) const;

  // Run in parts, for a caller that runs some steps its own way (the CPU's lane chains): Begin,
  // then RunStep for each step in order, then End. A step that RunStep does not run must leave
  // each of its outputs in its value's view, as its request says (see home and request).
  void Begin(std::vector<TensorView>& values, std::span<const TensorView> outputs) const;
  void RunStep(const OpContext& ctx, size_t step, Layout layout, std::vector<TensorView>& values,
               std::span<const TensorView> broadcast) const;
  void End(const OpContext& ctx, const std::vector<TensorView>& values,
           std::span<const TensorView> outputs) const;

  // Whether a step runs (some output is read or kept), and how it writes each output's view.
  bool runs(size_t step) const {
    return runs_[step] && home_[group_.steps[step].first_output] != Home::kAlias;
  }
  OpReq request(size_t step, uint32_t output) const { return req_[step][output]; }
  // Whether End copies the value into an output (a reshape's alias, or an added output).
  bool copied_at_end(uint32_t value) const;

 private:
  void AssignHomes(const std::vector<int>& last_read);
  void AssignSlots(const std::vector<int>& last_read);
  void IndexBroadcastUses();

  const FusedGroup& group_;
  std::vector<OpReq> out_req_;
  std::vector<Home> home_;                 // per value
  std::vector<int> slot_;                  // per value
  std::vector<std::vector<OpReq>> req_;    // per step, per output
  std::vector<bool> runs_;                 // per step: some output is not kNull
  std::vector<const ComputeFn*> compute_;  // per step
  const ComputeFn* copy_ = nullptr;        // _copy's: the copies at the end
  // (value, output index): values copied into their output after the last step, as its request
  // says (a reshape's alias, or a value whose output adds while later steps read the value).
  std::vector<std::pair<uint32_t, int>> at_end_;
  std::vector<int>
      broadcast_use_of_;  // per (step, arg), flattened: index into broadcast_uses_, or -1
  std::vector<uint32_t> arg_offset_;  // per step: where its args start in broadcast_use_of_
  std::vector<BroadcastUse> broadcast_uses_;
  int num_slots_ = 0;
};

}  // namespace weft
