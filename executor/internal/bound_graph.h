// BoundGraph: what binding computes once, and never changes after: the graph the bind pipeline
// made (passes/pipeline.h: optimized, typed and planned), every entry's array (user arrays for
// arguments, gradients and outputs; views of the memory plan's buffers for the rest), one
// Invocation per op node, and the segments of consecutive nodes that are pushed to the engine as
// one op each. It pushes nothing: a GraphRun (graph_run.h) pushes its segments, and is destroyed
// (which waits for them) before it. Immutable after construction, so engine workers may run several
// of its segments at once.
//
//   BoundGraph plan(graph, device, args, arg_grads, grad_args, grad_reqs);
//   for (uint32_t s : plan.segments(Phase::kForward)) ... plan.segment(s).reads ...
//   plan.RunSegment(s, is_train, key, run);   // on the engine worker
#pragma once

#include <array>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "executor/executor.h"
#include "graph/graph.h"
#include "ops/invocation.h"
#include "storage/ndarray.h"
#include "storage/random.h"

namespace weft {

enum class Phase : uint8_t { kForward, kBackward };

class BoundGraph {
 public:
  // Consecutive nodes of one phase, run in order by one engine op that reads and writes the
  // union of their vars.
  struct Segment {
    std::vector<uint32_t> nodes;  // indices into the invocations, in graph order
    std::vector<engine::VarHandle> reads, writes;
    // Random numbers each node draws, [0] outside training and [1] in training: the segment
    // reserves their ranges at once, and node k gets range k (ReserveRandom(device, counts)).
    std::array<std::vector<uint64_t>, 2> draws;
    std::array<bool, 2> random{};  // some node draws
    const char* name = nullptr;    // its first node's op, for the profile
    // Why a CUDA graph cannot record it (its one node's Op::CaptureBarrier); null: it can.
    const char* capture_barrier = nullptr;
    // Its nodes are stable (passes/stable_nodes.h) and own their outputs: a run pushes it only
    // when the versions of its argument reads changed since its last push (GraphRun).
    bool stable = false;
    // Its nodes' inputs that are arguments no node of the graph writes: their versions are read
    // at each push (engine::LastWritePushed) and handed to the ops (OpContext::input_versions).
    struct ArgumentRead {
      uint32_t node;   // position in `nodes`
      uint32_t input;  // the node's input
      engine::VarHandle var;
    };
    std::vector<ArgumentRead> argument_reads;
    // A stable segment's argument reads that it does not write itself (a stable node reading
    // another of the segment): their versions decide whether it must run again.
    std::vector<uint32_t> version_key;
  };

  // `graph` has been through the bind pipeline (typed, its memory planned); this binds every
  // entry to an array and prepares every node. Its outputs are the forward outputs, the gradients
  // of `grad_args`, then one per `write_back` name, bound to that argument's array
  // (GraphExtension). Throws weft::Error naming the node when an op cannot run on `device`.
  BoundGraph(const Graph& graph, Device device, const std::map<std::string, NDArray>& args,
             const std::map<std::string, NDArray>& arg_grads,
             const std::vector<std::string>& grad_args,
             const std::map<std::string, GradReq>& grad_reqs,
             const std::vector<std::string>& write_back = {});
  BoundGraph(const BoundGraph&) = delete;
  BoundGraph& operator=(const BoundGraph&) = delete;

  // Runs segment `s`'s nodes in order on the engine worker `run`; `key` is the segment's
  // reservation, cut among its nodes by AdvanceRandom, so no node's numbers depend on how the
  // nodes are grouped. `versions`: one per Segment::argument_reads, read when it was pushed (empty:
  // none given).
  void RunSegment(uint32_t s, bool is_train, RandomKey key, const engine::RunContext& run,
                  std::span<const uint64_t> versions = {}) const;

  const Graph& graph() const { return graph_; }
  Device device() const { return device_; }
  const Segment& segment(uint32_t s) const { return segments_[s]; }
  const std::vector<uint32_t>& segments(Phase phase) const {
    return phase_segments_[static_cast<int>(phase)];
  }
  std::vector<NDArray> forward_outputs() const;
  // One per forward output: arrays of the bound graph, which the run fills before Backward.
  const std::vector<NDArray>& head_grads() const { return head_grads_; }
  size_t NumNodes(Phase phase) const;

 private:
  void AllocateEntries(const std::map<std::string, NDArray>& args,
                       const std::map<std::string, NDArray>& arg_grads,
                       const std::vector<std::string>& grad_args,
                       const std::vector<std::string>& write_back);
  void PrepareNodes(const std::map<std::string, GradReq>& grad_reqs,
                    const std::vector<std::string>& grad_args);
  // Node n's call: its entries' arrays, each output's request (`output_req` for gradient and
  // write-back outputs).
  Invocation NodeInvocation(uint32_t n, const std::vector<uint32_t>& uses,
                            const std::map<uint32_t, OpReq>& output_req) const;
  void BuildSegments();
  void FindArgumentReads();

  Graph graph_;
  Device device_;
  std::vector<NDArray> entries_;         // per entry
  std::vector<NDArray> buffers_;         // per storage id of the memory plan
  std::vector<NDArray> head_grads_;      // per forward output
  std::vector<Invocation> invocations_;  // the graph's op nodes, in order
  std::vector<Phase> phase_;             // per invocation
  std::vector<bool>
      writes_gradient_;       // per invocation: it writes a gradient read outside the graph only
  std::vector<bool> stable_;  // per invocation: stable, its outputs its own (Segment::stable)
  std::vector<Segment> segments_;
  std::array<std::vector<uint32_t>, 2> phase_segments_;  // per phase, in push order
};

}  // namespace weft
