// StepCapture: a bound training step (forward in training, then backward with the extension's
// updates), or an inference forward (its stable segments left out: GraphRun pushes those only
// when their inputs changed), pushed as CUDA graphs on a GPU. The step's segments, in push order,
// are cut into groups at the segments a graph cannot record (Segment::capture_barrier: a device
// check of an input, a host wait); each group is pushed as ONE engine op that reads and writes the
// union of its segments' vars. That op records its segments into a CUDA graph the first time it
// runs (engine::DeviceBackend::Record) and replays the graph from then on; a barrier segment is
// pushed as the engine op it always is. GraphRun pushes the first kWarmupSteps steps as usual
// (kernels are compiled, algorithms chosen and workspaces sized then), and a StepCapture after.
//
// Why a replay is the same work as the pushes it stands for: a bound graph's nodes, attributes
// and arrays never change (bound_graph.h), so the recorded kernels read and write the same
// addresses with the same arguments; the group's workspace is its own (Workspace::ForRecording:
// no other op uses it, nothing frees it before this object goes). Random numbers: each step
// reserves every random segment's range at push, as the pushes do, so the global stream advances
// the same way; the recorded kernels read a shift in device memory (RandomKey::shift) which each
// replay sets to the distance from the recorded range to this step's. A new seed records again.
//
// Recording on one stream (the recording's own) rather than across the engine's worker streams:
// a step's segments form a chain (each reads what the one before wrote) apart from independent
// updates, so there is little concurrency across streams to keep, and one stream needs no
// cross-stream events inside the graph. A group whose recording fails (an op waits on the host,
// say) runs its segments in that same op instead, from then on, after one warning saying why.
//
// Threads: Push is called by the run's pushing thread; a group's state is used only by the
// worker running that group's op, and the group's ops are ordered by the engine (they write the
// same vars). Destroy only after every op it pushed has completed on the device (GraphRun's
// destructor waits for that).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "executor/internal/bound_graph.h"

namespace weft {

struct CaptureStats {
  size_t groups = 0;    // captured groups of segments per step
  size_t barriers = 0;  // segments pushed on their own per step
  size_t recorded = 0;  // groups replaying as a graph now
};

class StepCapture {
 public:
  static constexpr int kWarmupSteps = 2;
  // WEFT_CUDA_GRAPH=0|1 (default 1): whether a training step on a GPU is captured (read by each
  // GraphRun when it is made: at Bind). A bad value is a weft::Error naming the variable.
  static bool Enabled();

  // For `plan`'s training step, or (training false) its inference forward less the stable
  // segments; each op it pushes also reads `fence` (GraphRun's).
  StepCapture(const BoundGraph& plan, engine::VarHandle fence, bool training = true);
  ~StepCapture();
  StepCapture(const StepCapture&) = delete;
  StepCapture& operator=(const StepCapture&) = delete;

  // Pushes one step (the head gradients filled already). Returns the engine ops pushed.
  size_t Push();
  CaptureStats stats() const;

  struct Group;  // step_capture.cc

 private:
  const BoundGraph& plan_;
  engine::VarHandle fence_;
  const bool training_;
  std::vector<std::unique_ptr<Group>> groups_;  // in push order, barrier segments included
};

}  // namespace weft
