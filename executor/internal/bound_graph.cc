#include "executor/internal/bound_graph.h"

#include <algorithm>
#include <set>

#include "core/env.h"
#include "core/error.h"
#include "core/small_vector.h"
#include "passes/stable_nodes.h"

namespace weft {

namespace {

// Gradient output entry -> its request; write-back output entry (the outputs after the
// gradients) -> in place.
std::map<uint32_t, OpReq> OutputRequests(const Graph& g,
                                         const std::map<std::string, GradReq>& grad_reqs,
                                         const std::vector<std::string>& grad_args) {
  std::map<uint32_t, OpReq> req;
  const size_t grads_end = g.num_forward_outputs() + grad_args.size();
  for (size_t o = g.num_forward_outputs(); o < g.outputs().size(); ++o) {
    OpReq r = OpReq::kWriteInplace;  // a write-back
    if (o < grads_end) {
      r = grad_reqs.at(grad_args[o - g.num_forward_outputs()]) == GradReq::kAdd ? OpReq::kAddTo
                                                                                : OpReq::kWrite;
    }
    req[g.EntryId(g.outputs()[o])] = r;
  }
  return req;
}

// Per node: it writes a gradient output that no node of the graph reads (its readers are outside
// the graph: a data-parallel all-reduce, a user's update), of the first `num_grads` after the
// forward outputs.
std::vector<bool> WritesAGradientReadOutside(const Graph& g, size_t num_grads) {
  std::vector<uint32_t> node_reads(g.num_entries(), 0);
  for (const Node& node : g.nodes()) {
    for (const NodeEntry& in : node.inputs) ++node_reads[g.EntryId(in)];
  }
  std::vector<bool> writer(g.nodes().size(), false);
  for (size_t o = g.num_forward_outputs(); o < g.num_forward_outputs() + num_grads; ++o) {
    const NodeEntry& e = g.outputs()[o];
    if (node_reads[g.EntryId(e)] == 0) writer[e.node] = true;
  }
  return writer;
}

}  // namespace

BoundGraph::BoundGraph(const Graph& graph, Device device,
                       const std::map<std::string, NDArray>& args,
                       const std::map<std::string, NDArray>& arg_grads,
                       const std::vector<std::string>& grad_args,
                       const std::map<std::string, GradReq>& grad_reqs,
                       const std::vector<std::string>& write_back)
    : graph_(graph), device_(device) {
  graph_.memory();  // throws unless the graph is planned
  AllocateEntries(args, arg_grads, grad_args, write_back);
  PrepareNodes(grad_reqs, grad_args);
  BuildSegments();
  FindArgumentReads();
}

void BoundGraph::AllocateEntries(const std::map<std::string, NDArray>& args,
                                 const std::map<std::string, NDArray>& arg_grads,
                                 const std::vector<std::string>& grad_args,
                                 const std::vector<std::string>& write_back) {
  const Graph& g = graph_;
  const MemoryPlan& plan = g.memory();
  for (size_t bytes : plan.storage_bytes) {
    buffers_.emplace_back(Shape{static_cast<int64_t>(bytes)}, device_, DType::kUInt8);
  }
  entries_.resize(g.num_entries());
  for (uint32_t e = 0; e < g.num_entries(); ++e) {
    if (plan.storage_id[e] >= 0)
      entries_[e] = buffers_[plan.storage_id[e]].Alias(g.shapes()[e], g.dtypes()[e]);
  }
  for (uint32_t n : g.ArgumentNodes()) {
    auto it = args.find(g.node(n).name);
    if (it != args.end()) entries_[g.EntryId({n, 0})] = it->second;
  }
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {  // node order: an updated one's input first
    for (uint32_t o = 0; o < g.num_outputs(n); ++o) {
      const uint32_t e = g.EntryId({n, o});
      if (plan.storage_id[e] != MemoryPlan::kExternal || !plan.inplace[e]) continue;
      const Node& node = g.node(n);
      entries_[e] = entries_[g.EntryId(node.inputs[node.op->UpdatedInput(static_cast<int>(o))])];
    }
  }
  for (uint32_t h : g.head_grads()) {
    const uint32_t e = g.EntryId({h, 0});
    head_grads_.emplace_back(g.shapes()[e], device_, g.dtypes()[e]);
    entries_[e] = head_grads_.back();
  }
  const size_t grads_end = g.num_forward_outputs() + grad_args.size();
  for (size_t o = 0; o < g.outputs().size(); ++o) {
    const uint32_t e = g.EntryId(g.outputs()[o]);
    if (o >= grads_end) {
      entries_[e] = args.at(write_back[o - grads_end]);
    } else if (o >= g.num_forward_outputs()) {
      entries_[e] = arg_grads.at(grad_args[o - g.num_forward_outputs()]);
    } else if (entries_[e].is_none()) {
      entries_[e] = NDArray(g.shapes()[e], device_, g.dtypes()[e]);
    }
  }
  // External entries that are none of those (stable ones, passes/stable_nodes.h): their own arrays.
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (g.node(n).is_variable()) continue;
    for (uint32_t o = 0; o < g.num_outputs(n); ++o) {
      const uint32_t e = g.EntryId({n, o});
      if (plan.storage_id[e] == MemoryPlan::kExternal && entries_[e].is_none())
        entries_[e] = NDArray(g.shapes()[e], device_, g.dtypes()[e]);
    }
  }
}

Invocation BoundGraph::NodeInvocation(uint32_t n, const std::vector<uint32_t>& uses,
                                      const std::map<uint32_t, OpReq>& output_req) const {
  const Graph& g = graph_;
  const Node& node = g.node(n);
  Invocation call;
  try {
    call = Invocation(*node.op, node.attrs, device_);
  } catch (const Error& e) {
    WEFT_THROW("Bind: node '" << node.name << "': " << e.what());
  }
  for (const NodeEntry& in : node.inputs) {
    const NDArray& a = entries_[g.EntryId(in)];
    call.AddInput(a.View(), a.var());
  }
  for (uint32_t o = 0; o < g.num_outputs(n); ++o) {
    const uint32_t e = g.EntryId({n, o});
    OpReq req = uses[e] == 0 ? OpReq::kNull
                             : (g.memory().inplace[e] ? OpReq::kWriteInplace : OpReq::kWrite);
    if (auto it = output_req.find(e); it != output_req.end()) req = it->second;
    call.AddOutput(entries_[e].View(), entries_[e].var(), req);
  }
  try {
    call.Prepare();  // the tensors of a bound node never change
  } catch (const Error& e) {
    WEFT_THROW("Bind: node '" << node.name << "': " << e.what());
  }
  return call;
}

void BoundGraph::PrepareNodes(const std::map<std::string, GradReq>& grad_reqs,
                              const std::vector<std::string>& grad_args) {
  const std::vector<uint32_t> uses = graph_.EntryUseCounts();
  const std::map<uint32_t, OpReq> output_req = OutputRequests(graph_, grad_reqs, grad_args);
  const std::vector<bool> gradient_writer = WritesAGradientReadOutside(graph_, grad_args.size());
  const std::vector<bool> stable = StableEntries(graph_);
  const MemoryPlan& plan = graph_.memory();
  for (uint32_t n = 0; n < graph_.nodes().size(); ++n) {
    const Node& node = graph_.node(n);
    if (node.is_variable()) continue;
    invocations_.push_back(NodeInvocation(n, uses, output_req));
    phase_.push_back(node.is_backward() ? Phase::kBackward : Phase::kForward);
    writes_gradient_.push_back(gradient_writer[n]);
    // Stable, and the plan kept its outputs to themselves (CPU inference binds do).
    bool own = device_.is_cpu();
    for (uint32_t o = 0; o < graph_.num_outputs(n); ++o) {
      const uint32_t e = graph_.EntryId({n, o});
      own = own && stable[e] && plan.storage_id[e] == MemoryPlan::kExternal;
    }
    stable_.push_back(own);
  }
}

// Consecutive nodes of one phase, up to WEFT_EXEC_BULK_SIZE of them, run as one engine op that
// reads and writes the union of their vars. Fewer engine ops for small graphs, at the price of
// holding all of a segment's vars for the whole segment.
// A node that a CUDA graph cannot record (Op::CaptureBarrier) is a segment of its own, so that a
// captured step (step_capture.h) records the segments around it.
// A node that writes a gradient which only readers outside the graph read (a data-parallel
// all-reduce, a user's update; not the trainer's own updates, nodes of the graph) ends its segment:
// they start as soon as it is written, while the rest of backward runs, not when the segment's
// last node is done.
void BoundGraph::BuildSegments() {
  const size_t bulk = static_cast<size_t>(GetEnvInt("WEFT_EXEC_BULK_SIZE", 8, 1, 1 << 16));
  for (uint32_t i = 0; i < invocations_.size(); ++i) {
    const char* barrier =
        invocations_[i].op().CaptureBarrier(device_.type, invocations_[i].attrs());
    const bool start = segments_.empty() || segments_.back().nodes.size() >= bulk ||
                       phase_[segments_.back().nodes.back()] != phase_[i] || barrier != nullptr ||
                       segments_.back().capture_barrier != nullptr ||
                       writes_gradient_[segments_.back().nodes.back()] ||
                       segments_.back().stable != stable_[i];
    if (start) {
      segments_.emplace_back();
      segments_.back().name = invocations_[i].op().name.c_str();
      segments_.back().capture_barrier = barrier;
      segments_.back().stable = stable_[i];
      phase_segments_[static_cast<int>(phase_[i])].push_back(
          static_cast<uint32_t>(segments_.size() - 1));
    }
    Segment& seg = segments_.back();
    const Invocation& call = invocations_[i];
    seg.nodes.push_back(i);
    seg.reads.insert(seg.reads.end(), call.reads().begin(), call.reads().end());
    seg.writes.insert(seg.writes.end(), call.writes().begin(), call.writes().end());
    for (int train = 0; train < 2; ++train) {
      seg.draws[train].push_back(call.RandomDraws(train == 1));
      seg.random[train] = seg.random[train] || seg.draws[train].back() > 0;
    }
  }
}

// The inputs of each segment's nodes that are arguments no node writes (BatchNorm's running
// statistics, a cache the graph updates and write-backs are written; weights and data are not).
void BoundGraph::FindArgumentReads() {
  std::set<engine::VarHandle> written;
  for (const Invocation& call : invocations_)
    written.insert(call.writes().begin(), call.writes().end());
  std::set<engine::VarHandle> arguments;
  for (uint32_t n : graph_.ArgumentNodes()) {
    const NDArray& a = entries_[graph_.EntryId({n, 0})];
    if (!a.is_none() && !written.contains(a.var())) arguments.insert(a.var());
  }
  // Stable nodes' outputs too: written only when their own arguments change (GraphRun skips them
  // otherwise), so their versions stand still between calls like an argument's.
  for (uint32_t i = 0; i < invocations_.size(); ++i) {
    if (stable_[i])
      arguments.insert(invocations_[i].writes().begin(), invocations_[i].writes().end());
  }
  for (Segment& seg : segments_) {
    for (uint32_t k = 0; k < seg.nodes.size(); ++k) {
      const std::span<const engine::VarHandle> vars = invocations_[seg.nodes[k]].input_vars();
      for (uint32_t i = 0; i < vars.size(); ++i)
        if (arguments.contains(vars[i])) seg.argument_reads.push_back({k, i, vars[i]});
    }
    if (!seg.stable) continue;
    const std::set<engine::VarHandle> own(seg.writes.begin(), seg.writes.end());
    for (uint32_t r = 0; r < seg.argument_reads.size(); ++r) {
      if (!own.contains(seg.argument_reads[r].var)) seg.version_key.push_back(r);
    }
  }
}

void BoundGraph::RunSegment(uint32_t s, bool is_train, RandomKey key, const engine::RunContext& run,
                            std::span<const uint64_t> versions) const {
  const Segment& seg = segments_[s];
  const std::vector<uint64_t>& draws = seg.draws[is_train];
  OpContext ctx;
  ctx.run = run;
  ctx.is_train = is_train;
  size_t next = 0;  // the first of seg.argument_reads not yet given to a node
  for (size_t k = 0; k < seg.nodes.size(); ++k) {
    const Invocation& call = invocations_[seg.nodes[k]];
    ctx.random = key;
    key = AdvanceRandom(key, draws[k]);
    SmallVector<uint64_t, 4> node_versions;
    if (!versions.empty() && next < seg.argument_reads.size() &&
        seg.argument_reads[next].node == k) {
      for (size_t i = 0; i < call.inputs().size(); ++i) node_versions.push_back(0);
      for (; next < seg.argument_reads.size() && seg.argument_reads[next].node == k; ++next)
        node_versions[seg.argument_reads[next].input] = versions[next];
    }
    ctx.input_versions = node_versions.span();
    call.Run(ctx);
  }
}

std::vector<NDArray> BoundGraph::forward_outputs() const {
  std::vector<NDArray> out;
  for (size_t o = 0; o < graph_.num_forward_outputs(); ++o) {
    out.push_back(entries_[graph_.EntryId(graph_.outputs()[o])]);
  }
  return out;
}

size_t BoundGraph::NumNodes(Phase phase) const {
  return static_cast<size_t>(std::count(phase_.begin(), phase_.end(), phase));
}

}  // namespace weft
