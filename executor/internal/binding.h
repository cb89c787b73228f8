// A graph bound to arrays: every entry's array (user arrays for arguments, gradients and
// outputs; views of the memory plan's buffers for the rest), each node's tensors and output
// requests, and the segments of consecutive nodes pushed to the engine as one op each.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/small_vector.h"
#include "engine/engine.h"
#include "executor/executor.h"
#include "graph/graph.h"
#include "ops/op.h"
#include "storage/random.h"

namespace weft {

class Binding {
 public:
  Binding() = default;
  // `graph` has been through inference; this plans memory and prepares every node.
  static Binding Create(Graph graph, Device device, const std::map<std::string, NDArray>& args,
                        const std::map<std::string, NDArray>& arg_grads, const std::vector<std::string>& grad_args,
                        const std::map<std::string, GradReq>& grad_reqs);

  // Pushes the forward (or backward) segments; returns how many engine ops that took.
  size_t Push(bool backward, bool is_train);

  const Graph& graph() const { return graph_; }
  std::vector<NDArray> forward_outputs() const;
  std::vector<NDArray>& head_grads() { return head_grads_; }
  size_t NumNodes(bool backward) const;

 private:
  struct NodeRun {
    const Op* op = nullptr;
    Attrs attrs;
    const ComputeFn* compute = nullptr;
    SmallVector<TensorView, 4> inputs, outputs;
    SmallVector<OpReq, 4> req;
    SmallVector<engine::VarHandle, 4> reads, writes;
    bool backward = false;
  };
  struct Segment {
    std::vector<size_t> nodes;  // indices into runs_
    std::vector<engine::VarHandle> reads, writes;
    uint64_t random_count = 0;  // random numbers the segment's random ops draw per run
  };
  // What one pushed segment carries (fits engine::Function's inline storage).
  struct SegmentCall {
    Binding* binding;
    uint32_t segment;
    bool is_train;
    RandomKey random;
  };

  void AllocateEntries(Device device, const std::map<std::string, NDArray>& args,
                       const std::map<std::string, NDArray>& arg_grads, const std::vector<std::string>& grad_args);
  void PrepareNodes(const std::map<std::string, GradReq>& grad_reqs, const std::vector<std::string>& grad_args);
  void BuildSegments();
  void RunSegment(const SegmentCall& call, const engine::RunContext& run) const;

  Graph graph_;
  Device device_;
  std::vector<NDArray> entries_;     // per entry
  std::vector<NDArray> buffers_;     // per storage id of the memory plan
  std::vector<NDArray> head_grads_;  // per forward output
  std::vector<NodeRun> runs_;        // the graph's op nodes, in order
  std::vector<Segment> segments_;
  std::vector<uint32_t> forward_segments_, backward_segments_;
};

}  // namespace weft
