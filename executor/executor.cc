#include "executor/executor.h"

#include <algorithm>
#include <set>

#include "core/env.h"
#include "core/error.h"
#include "core/text.h"
#include "executor/internal/bound_graph.h"
#include "executor/internal/graph_run.h"
#include "passes/cse.h"
#include "passes/fuse_pointwise.h"
#include "passes/gradient.h"
#include "passes/infer.h"
#include "passes/plan_memory.h"

namespace weft {

namespace {

// The graph the executor runs: forward, CSE'd, with the backward graph for requested gradients.
Graph BuildGraph(const Symbol& symbol, const std::map<std::string, GradReq>& reqs,
                 std::vector<std::string>& grad_args) {
  Graph g = symbol.ToGraph();
  if (GetEnvBool("WEFT_ELIMINATE_COMMON_EXPR", true)) g = EliminateCommonExpr(g);
  std::vector<uint32_t> wrt;
  for (uint32_t n : g.ArgumentNodes()) {
    auto it = reqs.find(g.node(n).name);
    if (it != reqs.end() && it->second != GradReq::kNull) {
      wrt.push_back(n);
      grad_args.push_back(g.node(n).name);
    }
  }
  return wrt.empty() ? g : Gradient(g, wrt);
}

// The arguments a user binds: the graph's variables but the head gradients the gradient pass added.
std::vector<std::string> ArgumentNames(const Graph& g) {
  std::vector<std::string> names;
  for (uint32_t n : g.ArgumentNodes()) {
    if (std::count(g.head_grads().begin(), g.head_grads().end(), n) == 0)
      names.push_back(g.node(n).name);
  }
  return names;
}

std::string Names(const Graph& g) { return QuotedList(ArgumentNames(g)); }

// Every name given to Bind must be an argument of the graph: a misspelt one would be ignored.
void CheckNames(const Graph& g, const Executor::ArrayMap& args, const Executor::ArrayMap& grads,
                const std::map<std::string, GradReq>& reqs) {
  const std::vector<std::string> known = ArgumentNames(g);
  const std::set<std::string> known_set(known.begin(), known.end());
  const auto check = [&](const char* what, const std::string& name) {
    if (known_set.count(name) != 0) return;
    WEFT_THROW("Bind: " << what << " '" << Abbreviate(name)
                        << "' is not an argument of the graph; the graph's arguments are "
                        << QuotedList(known) << DidYouMean(name, known));
  };
  for (const auto& [name, array] : args) check("argument", name);
  for (const auto& [name, array] : grads) check("gradient array", name);
  for (const auto& [name, req] : reqs) check("gradient request", name);
}

// Per node of `g`: an argument that a node reads on the host (Op::host_inputs), which is bound to
// a CPU array on any device. Off the CPU (where host inputs are inputs like the others), throws
// weft::Error for a host input that is not an argument, and for an argument read both on the
// host and on the device.
std::vector<bool> HostArgumentNodes(const Graph& g, Device device) {
  std::vector<bool> host(g.nodes().size(), false), on_device(g.nodes().size(), false);
  for (const Node& node : g.nodes()) {
    if (node.is_variable()) continue;
    const std::vector<int> reads_on_host = node.op->HostInputsOf(node.attrs);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const uint32_t source = node.inputs[i].node;
      if (std::find(reads_on_host.begin(), reads_on_host.end(), static_cast<int>(i)) ==
          reads_on_host.end()) {
        on_device[source] = true;
        continue;
      }
      if (!g.node(source).is_variable() && !device.is_cpu()) {
        WEFT_THROW(
            "Bind: node '" << node.name << "' (" << node.op->name << ") reads input " << i
                           << " on the host: "
                           << "expected an argument there (a CPU array), found the output of node '"
                           << g.node(source).name << "'");
      }
      host[source] = g.node(source).is_variable();
    }
  }
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (host[n] && on_device[n] && !device.is_cpu()) {
      WEFT_THROW("Bind: argument '" << Abbreviate(g.node(n).name)
                                    << "' is read on the host by one node and on " << device
                                    << " by another: give each its own argument");
    }
  }
  return host;
}

void CheckArguments(const Graph& g, Device device, const Executor::ArrayMap& args) {
  const std::vector<bool> host = HostArgumentNodes(g, device);
  for (uint32_t n : g.ArgumentNodes()) {
    if (std::count(g.head_grads().begin(), g.head_grads().end(), n)) continue;
    const std::string& name = g.node(n).name;
    auto it = args.find(name);
    if (it == args.end() || it->second.is_none()) {
      WEFT_THROW("Bind: argument '" << Abbreviate(name)
                                    << "' is missing; expected arrays for: " << Names(g));
    }
    const Device expected = host[n] ? Device::Cpu() : device;
    if (it->second.device() != expected) {
      WEFT_THROW("Bind: argument '" << Abbreviate(name) << "' is on " << it->second.device()
                                    << ", expected " << expected
                                    << (host[n] ? " (a node reads it on the host)" : ""));
    }
  }
}

void CheckGradients(const Graph& g, const std::vector<std::string>& grad_args,
                    const Executor::ArrayMap& args, const Executor::ArrayMap& grads) {
  for (const std::string& name : grad_args) {
    auto it = grads.find(name);
    if (it == grads.end() || it->second.is_none()) {
      WEFT_THROW("Bind: a gradient is requested for '" << Abbreviate(name)
                                                       << "' but no gradient array was given");
    }
    const NDArray& arg = args.at(name);
    if (it->second.shape() != arg.shape() || it->second.dtype() != arg.dtype() ||
        it->second.device() != arg.device()) {
      WEFT_THROW("Bind: gradient of '" << Abbreviate(name) << "' must be " << arg.shape() << " "
                                       << arg.dtype() << " on " << arg.device() << ", found "
                                       << it->second.ToString());
    }
  }
}

// The graph with the extension's nodes appended, checked against what GraphExtension promises.
Graph Extend(const Graph& g, const std::vector<std::string>& grad_args,
             const GraphExtension& extension) {
  if (!extension.append) {
    WEFT_CHECK(extension.write_back.empty())
        << "Bind: write_back arguments without an extension that appends them";
    return g;
  }
  Graph out = extension.append(g, grad_args);
  WEFT_CHECK_EQ(out.outputs().size(), g.outputs().size() + extension.write_back.size())
      << "Bind: the graph extension must append one output per write_back argument";
  WEFT_CHECK_EQ(out.num_forward_outputs(), g.num_forward_outputs())
      << "Bind: the graph extension changed the outputs";
  for (uint32_t n = static_cast<uint32_t>(g.nodes().size()); n < out.nodes().size(); ++n) {
    const Node& node = out.node(n);
    WEFT_CHECK(node.is_variable() || node.is_backward())
        << "Bind: the graph extension's node '" << node.name << "' must be a backward node";
  }
  return out;
}

// Each write-back output (outputs from `first` on) matches the argument it is written into.
void CheckWriteBacks(const Graph& g, size_t first, const std::vector<std::string>& write_back,
                     const Executor::ArrayMap& args) {
  for (size_t i = 0; i < write_back.size(); ++i) {
    const uint32_t e = g.EntryId(g.outputs()[first + i]);
    auto it = args.find(write_back[i]);
    if (it == args.end())
      WEFT_THROW("Bind: write_back argument '" << Abbreviate(write_back[i]) << "' is not bound");
    if (g.shapes()[e] != it->second.shape() || g.dtypes()[e] != it->second.dtype()) {
      WEFT_THROW("Bind: argument '" << Abbreviate(write_back[i]) << "' (" << it->second.shape()
                                    << " " << it->second.dtype()
                                    << ") cannot take the output written into it, " << g.shapes()[e]
                                    << " " << g.dtypes()[e]);
    }
  }
}

// The nodes of the outputs from `first` on (the write-backs) moved after every other node, in
// their order. Nothing reads their outputs, so the order stays topological, and every other
// reader of the arguments they write runs before them: fusion orders nodes by readiness, which
// could put an update before a reader of the old weight.
Graph WriteBacksLast(const Graph& g, size_t first) {
  std::vector<bool> last(g.nodes().size(), false);
  for (size_t o = first; o < g.outputs().size(); ++o) last[g.outputs()[o].node] = true;
  std::vector<uint32_t> order,
      index(g.nodes().size());  // old node per new position; new index per old node
  for (bool moved : {false, true}) {
    for (uint32_t n = 0; n < g.nodes().size(); ++n) {
      if (last[n] == moved) index[n] = static_cast<uint32_t>(order.size()), order.push_back(n);
    }
  }
  GraphBuilder b;
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (uint32_t n : order) {
    Node node = g.node(n);
    for (NodeEntry& in : node.inputs) {
      WEFT_CHECK(!last[in.node]) << "Bind: node '" << node.name << "' reads a write_back output";
      in.node = index[in.node];
    }
    if (node.forward_node >= 0) node.forward_node = index[node.forward_node];
    for (uint32_t o = 0; o < g.num_outputs(n); ++o) {
      shapes.push_back(g.shapes()[g.EntryId({n, o})]);
      dtypes.push_back(g.dtypes()[g.EntryId({n, o})]);
    }
    b.nodes.push_back(std::move(node));
  }
  for (const NodeEntry& e : g.outputs()) b.outputs.push_back({index[e.node], e.index});
  b.num_forward_outputs = g.num_forward_outputs();
  for (uint32_t h : g.head_grads()) b.head_grads.push_back(index[h]);
  return std::move(b).Freeze().WithTypes(std::move(shapes), std::move(dtypes));
}

// Whether the device's backend runs fused groups (every backend built with weft does; one that
// does not keeps its graphs unfused rather than failing to bind).
bool CanFuse(Device device) { return GetOp("_fused_pointwise").On(device.type).compute != nullptr; }

}  // namespace

struct Executor::Impl {
  Impl(const Graph& graph, Device device, const ArrayMap& args, const ArrayMap& arg_grads,
       const std::vector<std::string>& grad_args, const std::map<std::string, GradReq>& grad_reqs,
       const std::vector<std::string>& write_back)
      : plan(graph, device, args, arg_grads, grad_args, grad_reqs, write_back), run(plan) {}
  const BoundGraph plan;  // computed once by Bind
  GraphRun run;           // destroyed first: waits for what it pushed
};

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Executor::~Executor() = default;

namespace {

// What Bind runs: the symbol's graph with its gradients and the extension, checked against the
// arrays, typed, fused, and with the write-backs last.
Graph BindGraph(const Symbol& symbol, Device device, const Executor::ArrayMap& args,
                const Executor::ArrayMap& arg_grads,
                const std::map<std::string, GradReq>& grad_reqs, const GraphExtension& extension,
                std::vector<std::string>& grad_args, FusionStats& fusion) {
  Graph g = BuildGraph(symbol, grad_reqs, grad_args);
  const size_t first_write_back = g.outputs().size();
  g = Extend(g, grad_args, extension);
  CheckNames(g, args, arg_grads, grad_reqs);
  CheckArguments(g, device, args);
  std::map<std::string, Shape> shapes;
  std::map<std::string, DType> dtypes;
  for (const auto& [name, array] : args) shapes[name] = array.shape(), dtypes[name] = array.dtype();
  g = InferShapesAndTypes(g, shapes, dtypes,
                          device.type);  // a wrong argument is named here, before its gradient
  CheckGradients(g, grad_args, args, arg_grads);
  CheckWriteBacks(g, first_write_back, extension.write_back, args);
  if (GetEnvBool("WEFT_USE_FUSION", true) && CanFuse(device))
    g = FusePointwise(g, &fusion, device.is_gpu());
  return extension.write_back.empty() ? g : WriteBacksLast(g, first_write_back);
}

}  // namespace

std::unique_ptr<Executor> Executor::Bind(const Symbol& symbol, Device device, const ArrayMap& args,
                                         const ArrayMap& arg_grads,
                                         const std::map<std::string, GradReq>& grad_reqs,
                                         const GraphExtension& extension) {
  std::vector<std::string> grad_args;
  FusionStats fusion;
  const Graph g =
      BindGraph(symbol, device, args, arg_grads, grad_reqs, extension, grad_args, fusion);
  std::unique_ptr<Executor> exec(new Executor(std::make_unique<Impl>(
      g, device, args, arg_grads, grad_args, grad_reqs, extension.write_back)));
  exec->symbol_ = symbol;
  exec->device_ = device;
  exec->args_ = args;
  exec->arg_grads_ = arg_grads;
  exec->grad_reqs_ = grad_reqs;
  exec->extension_ = extension;
  exec->outputs_ = exec->impl_->plan.forward_outputs();
  exec->fused_groups_ = fusion.groups;
  exec->fused_nodes_ = fusion.fused_nodes;
  exec->recomputed_nodes_ = fusion.recomputed;
  return exec;
}

std::vector<std::string> Executor::HostArguments(const Symbol& symbol) {
  const Graph g = symbol.ToGraph();
  const std::vector<bool> host = HostArgumentNodes(g, Device::Cpu());
  std::vector<std::string> names;
  for (uint32_t n : g.ArgumentNodes()) {
    if (host[n]) names.push_back(g.node(n).name);
  }
  return names;
}

void Executor::Forward(bool is_train) { impl_->run.Push(Phase::kForward, is_train); }

const std::vector<NDArray>& Executor::head_grads() const { return impl_->plan.head_grads(); }

void Executor::Backward(const std::vector<NDArray>& head_grads) {
  const BoundGraph& plan = impl_->plan;
  if (plan.NumNodes(Phase::kBackward) == 0 && plan.head_grads().empty()) {
    WEFT_THROW(
        "Backward: no gradient was requested when the executor was bound (every grad_req is null)");
  }
  if (!head_grads.empty() && head_grads.size() != plan.head_grads().size()) {
    WEFT_THROW("Backward: expected " << plan.head_grads().size()
                                     << " head gradient(s), one per output, found "
                                     << head_grads.size());
  }
  impl_->run.SetHeadGrads(head_grads);
  impl_->run.Push(Phase::kBackward, /*is_train=*/true);
}

void Executor::TrainStep() {
  const BoundGraph& plan = impl_->plan;
  if (plan.NumNodes(Phase::kBackward) == 0 && plan.head_grads().empty()) {
    WEFT_THROW(
        "TrainStep: no gradient was requested when the executor was bound (every grad_req is "
        "null)");
  }
  impl_->run.PushStep();
}

ExecutorStats Executor::stats() const {
  const BoundGraph& plan = impl_->plan;
  ExecutorStats stats;
  stats.forward_nodes = plan.NumNodes(Phase::kForward);
  stats.backward_nodes = plan.NumNodes(Phase::kBackward);
  stats.plan_bytes = plan.graph().memory().total_bytes;
  stats.naive_bytes = plan.graph().memory().naive_bytes;
  const RunStats run = impl_->run.stats();
  stats.engine_ops_pushed = run.engine_ops_pushed;
  stats.cuda_graphs = run.capture.recorded;
  stats.capture_groups = run.capture.groups;
  stats.capture_barriers = run.capture.barriers;
  stats.fused_groups = fused_groups_;
  stats.fused_nodes = fused_nodes_;
  stats.recomputed_nodes = recomputed_nodes_;
  return stats;
}

std::unique_ptr<Executor> Executor::Reshape(const std::map<std::string, Shape>& shapes) const {
  ArrayMap args = args_, grads = arg_grads_;
  for (const auto& [name, shape] : shapes) {
    auto it = args.find(name);
    if (it == args.end()) WEFT_THROW("Reshape: no argument named '" << name << "'");
    if (it->second.shape() == shape) continue;
    it->second = NDArray(shape, device_, it->second.dtype());
    auto g = grads.find(name);
    if (g != grads.end()) g->second = NDArray(shape, device_, g->second.dtype());
  }
  return Bind(symbol_, device_, args, grads, grad_reqs_, extension_);
}

}  // namespace weft
