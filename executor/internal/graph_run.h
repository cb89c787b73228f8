// GraphRun: one run of a BoundGraph, everything Forward and Backward change. It pushes a phase's
// segments (reserving each segment's random numbers at push, in push order, so a seed gives the
// same numbers whatever the engine), fills the head gradients, and keeps the statistics of its
// last push.
//
// Its destructor waits for the ops it pushed and for nothing else: each of them also reads a var
// of the run's own (fence_), and the engine runs that var's deleter after all of them, whatever
// they threw. No error is reported or cleared by the wait: errors stay on the vars the failed ops
// wrote, for whoever waits on those. Not thread-safe: one thread drives a run.
//
//   GraphRun run(plan);
//   run.Push(Phase::kForward, /*is_train=*/true);
//   run.SetHeadGrads({});  run.Push(Phase::kBackward, true);
//   run.PushStep();        // both, on a GPU as CUDA graphs after the first steps (step_capture.h)
//   run.Push(Phase::kForward, /*is_train=*/false);   // on a GPU as CUDA graphs after the first
//                          // inference forwards too, the stable segments pushed as before
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/small_vector.h"
#include "engine/engine.h"
#include "executor/internal/bound_graph.h"
#include "executor/internal/step_capture.h"
#include "storage/ndarray.h"

namespace weft {

struct RunStats {
  size_t engine_ops_pushed = 0;    // by the last Push or PushStep
  CaptureStats capture;            // of the captured step, once PushStep captures
  CaptureStats inference_capture;  // of the captured inference forward, once Push captures it
};

class GraphRun {
 public:
  explicit GraphRun(const BoundGraph& plan);  // `plan` must outlive the run
  ~GraphRun();
  GraphRun(const GraphRun&) = delete;
  GraphRun& operator=(const GraphRun&) = delete;

  // A phase's segments; an inference forward on a GPU, with WEFT_CUDA_GRAPH on, after the first
  // StepCapture::kWarmupSteps, as CUDA graphs (its stable segments pushed as before).
  void Push(Phase phase, bool is_train);
  // Before a backward Push: the head gradients become copies of `given` (one per forward
  // output, checked by the caller), or ones when `given` is empty.
  void SetHeadGrads(const std::vector<NDArray>& given);
  // A training step: forward in training, then backward from head gradients of ones. On a GPU,
  // with WEFT_CUDA_GRAPH on, steps after the first StepCapture::kWarmupSteps are captured.
  void PushStep();
  RunStats stats() const;

 private:
  bool StableUpToDate(uint32_t s, bool is_train);
  // Pushes the phase's segments one engine op each (only the stable ones: `only_stable`),
  // skipping stable segments already up to date; returns how many it pushed.
  size_t PushSegments(Phase phase, bool is_train, bool only_stable);
  // What one pushed segment carries (fits engine::Function's inline storage).
  struct SegmentCall {
    const BoundGraph* plan;
    uint32_t segment;
    bool is_train;
    RandomKey random;
    SmallVector<uint64_t, 4> versions;  // of the segment's argument reads, at push
  };

  const BoundGraph& plan_;
  engine::VarHandle fence_;                            // read by every op this run pushes
  std::vector<std::vector<engine::VarHandle>> reads_;  // per segment: its reads, and fence_
  bool head_grads_are_ones_ = false;                   // the head gradients hold the default ones
  RunStats stats_;
  const bool capture_enabled_;  // on a GPU, with WEFT_CUDA_GRAPH on (read at construction)
  int steps_ = 0;               // PushStep calls
  int inference_forwards_ = 0;  // inference Push(kForward) calls
  std::unique_ptr<StepCapture> capture_;  // after the warm-up steps (destroyed after the wait)
  std::unique_ptr<StepCapture> inference_capture_;  // likewise, after the warm-up forwards
  // Per stable segment (BoundGraph::Segment::stable): the versions of its version_key reads and
  // the mode it was last pushed with; empty until it is first pushed.
  std::vector<SmallVector<uint64_t, 4>> stable_pushed_;
};

}  // namespace weft
