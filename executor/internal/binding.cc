#include "executor/internal/binding.h"

#include <algorithm>
#include <set>

#include "core/env.h"
#include "core/error.h"
#include "passes/plan_memory.h"

namespace weft {

namespace {

// Entries bound to user arrays: arguments, head gradients, and every graph output.
std::vector<bool> ExternalEntries(const Graph& g) {
  std::vector<bool> external(g.num_entries(), false);
  for (uint32_t n : g.ArgumentNodes()) external[g.EntryId({n, 0})] = true;
  for (const NodeEntry& e : g.outputs) external[g.EntryId(e)] = true;
  return external;
}

}  // namespace

Binding Binding::Create(Graph graph, Device device, const std::map<std::string, NDArray>& args,
                        const std::map<std::string, NDArray>& arg_grads, const std::vector<std::string>& grad_args,
                        const std::map<std::string, GradReq>& grad_reqs) {
  Binding b;
  PlanOptions options;
  options.reuse = options.inplace = GetEnvBool("WEFT_PLAN_MEMORY", true);
  b.graph_ = PlanMemory(std::move(graph), ExternalEntries(graph), options);
  b.device_ = device;
  b.AllocateEntries(device, args, arg_grads, grad_args);
  b.PrepareNodes(grad_reqs, grad_args);
  b.BuildSegments();
  return b;
}

void Binding::AllocateEntries(Device device, const std::map<std::string, NDArray>& args,
                              const std::map<std::string, NDArray>& arg_grads, const std::vector<std::string>& grad_args) {
  const Graph& g = graph_;
  const MemoryPlan& plan = *g.memory;
  for (size_t bytes : plan.storage_bytes) buffers_.emplace_back(Shape{static_cast<int64_t>(bytes)}, device, DType::kUInt8);
  entries_.resize(g.num_entries());
  for (uint32_t e = 0; e < g.num_entries(); ++e) {
    if (plan.storage_id[e] >= 0) entries_[e] = buffers_[plan.storage_id[e]].Alias((*g.shapes)[e], (*g.dtypes)[e]);
  }
  for (uint32_t n : g.ArgumentNodes()) {
    auto it = args.find(g.nodes[n].name);
    if (it != args.end()) entries_[g.EntryId({n, 0})] = it->second;
  }
  for (uint32_t h : g.head_grads) {
    const uint32_t e = g.EntryId({h, 0});
    head_grads_.emplace_back((*g.shapes)[e], device, (*g.dtypes)[e]);
    entries_[e] = head_grads_.back();
  }
  for (size_t o = 0; o < g.outputs.size(); ++o) {
    const uint32_t e = g.EntryId(g.outputs[o]);
    if (o >= g.num_forward_outputs) {
      entries_[e] = arg_grads.at(grad_args[o - g.num_forward_outputs]);
    } else if (entries_[e].is_none()) {
      entries_[e] = NDArray((*g.shapes)[e], device, (*g.dtypes)[e]);
    }
  }
}

void Binding::PrepareNodes(const std::map<std::string, GradReq>& grad_reqs, const std::vector<std::string>& grad_args) {
  const Graph& g = graph_;
  const std::vector<uint32_t> uses = g.EntryUseCounts();
  std::map<uint32_t, OpReq> grad_req;  // gradient output entry -> its request
  for (size_t o = g.num_forward_outputs; o < g.outputs.size(); ++o) {
    const GradReq r = grad_reqs.at(grad_args[o - g.num_forward_outputs]);
    grad_req[g.EntryId(g.outputs[o])] = r == GradReq::kAdd ? OpReq::kAddTo : OpReq::kWrite;
  }
  for (uint32_t n = 0; n < g.nodes.size(); ++n) {
    const Node& node = g.nodes[n];
    if (node.is_variable()) continue;
    NodeRun run;
    run.op = node.op;
    run.attrs = node.attrs;
    run.compute = &node.op->compute[static_cast<int>(device_.type)];
    run.backward = node.is_backward();
    if (!*run.compute) WEFT_THROW("Bind: op '" << node.op->name << "' (node '" << node.name << "') has no implementation for " << device_);
    for (const NodeEntry& in : node.inputs) {
      run.inputs.push_back(entries_[g.EntryId(in)].View());
      run.reads.push_back(entries_[g.EntryId(in)].var());
    }
    for (uint32_t o = 0; o < node.num_outputs(); ++o) {
      const uint32_t e = g.EntryId({n, o});
      run.outputs.push_back(entries_[e].View());
      OpReq req = uses[e] == 0 ? OpReq::kNull : (g.memory->inplace[e] ? OpReq::kWriteInplace : OpReq::kWrite);
      if (grad_req.count(e)) req = grad_req[e];
      run.req.push_back(req);
      if (req != OpReq::kNull) run.writes.push_back(entries_[e].var());
    }
    runs_.push_back(std::move(run));
  }
}

}  // namespace weft

namespace weft {

// Consecutive nodes of one phase, up to WEFT_EXEC_BULK_SIZE of them, run as one engine op that
// reads and writes the union of their vars. Fewer engine ops for small graphs, at the price of
// holding all of a segment's vars for the whole segment.
void Binding::BuildSegments() {
  const size_t bulk = static_cast<size_t>(GetEnvInt("WEFT_EXEC_BULK_SIZE", 8, 1, 1 << 16));
  for (size_t i = 0; i < runs_.size(); ++i) {
    const bool start = segments_.empty() || segments_.back().nodes.size() >= bulk ||
                       runs_[segments_.back().nodes.back()].backward != runs_[i].backward;
    if (start) {
      segments_.emplace_back();
      (runs_[i].backward ? backward_segments_ : forward_segments_).push_back(static_cast<uint32_t>(segments_.size() - 1));
    }
    Segment& seg = segments_.back();
    seg.nodes.push_back(i);
    seg.reads.insert(seg.reads.end(), runs_[i].reads.begin(), runs_[i].reads.end());
    seg.writes.insert(seg.writes.end(), runs_[i].writes.begin(), runs_[i].writes.end());
    if (runs_[i].op->random) {
      for (const TensorView& out : runs_[i].outputs) seg.random_count += static_cast<uint64_t>(out.size()) * 2;
    }
  }
}

size_t Binding::Push(bool backward, bool is_train) {
  const std::vector<uint32_t>& segments = backward ? backward_segments_ : forward_segments_;
  for (uint32_t s : segments) {
    const Segment& seg = segments_[s];
    SegmentCall call{this, s, is_train, {}};
    if (seg.random_count > 0) call.random = ReserveRandom(device_, seg.random_count);
    engine::Engine::Get()->PushSync([call](engine::RunContext run) { call.binding->RunSegment(call, run); }, device_,
                                    seg.reads, seg.writes, engine::FnProperty::kNormal, 0,
                                    runs_[seg.nodes.front()].op->name.c_str());
  }
  return segments.size();
}

// Runs the segment's nodes in order. A random op draws from its own part of the segment's
// reserved range, so results do not depend on how nodes are grouped.
void Binding::RunSegment(const SegmentCall& call, const engine::RunContext& run) const {
  RandomKey key = call.random;
  for (size_t i : segments_[call.segment].nodes) {
    const NodeRun& r = runs_[i];
    OpContext ctx;
    ctx.run = run;
    ctx.is_train = call.is_train;
    if (r.op->random) {
      ctx.random = key;
      uint64_t count = 0;
      for (const TensorView& out : r.outputs) count += static_cast<uint64_t>(out.size()) * 2;
      key.offset += (count + 3) / 4 + 1;
    }
    (*r.compute)(ctx, r.attrs, r.inputs.span(), r.req.span(), r.outputs.span());
  }
}

std::vector<NDArray> Binding::forward_outputs() const {
  std::vector<NDArray> out;
  for (size_t o = 0; o < graph_.num_forward_outputs; ++o) {
    out.push_back(entries_[graph_.EntryId(graph_.outputs[o])]);
  }
  return out;
}

size_t Binding::NumNodes(bool backward) const {
  return static_cast<size_t>(std::count_if(runs_.begin(), runs_.end(), [&](const NodeRun& r) { return r.backward == backward; }));
}

}  // namespace weft
