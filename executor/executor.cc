#include "executor/executor.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/text.h"
#include "executor/internal/bound_graph.h"
#include "executor/internal/graph_run.h"
#include "passes/dot.h"
#include "passes/pipeline.h"

namespace weft {

namespace {

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

}  // namespace

struct Executor::Impl {
  Impl(BindResult result, Device device, const ArrayMap& args, const ArrayMap& arg_grads,
       const std::map<std::string, GradReq>& grad_reqs, const std::vector<std::string>& write_back)
      : passes(std::move(result)),
        plan(this->passes.graph, device, args, arg_grads, this->passes.grad_args, grad_reqs,
             write_back),
        run(plan) {}
  const BindResult passes;  // what the bind pipeline made, pass by pass
  const BoundGraph plan;    // computed once by Bind
  GraphRun run;             // destroyed first: waits for what it pushed
};

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Executor::~Executor() = default;

namespace {

// What Bind runs: the symbol's graph through the bind pipeline (passes/pipeline.h), with the
// extension's nodes and the checks of the arrays given.
BindResult BindGraph(const Symbol& symbol, Device device, const Executor::ArrayMap& args,
                     const Executor::ArrayMap& arg_grads,
                     const std::map<std::string, GradReq>& grad_reqs,
                     const GraphExtension& extension) {
  BindRequest request;
  request.device = device;
  for (const auto& [name, req] : grad_reqs) {
    if (req != GradReq::kNull) request.differentiate.insert(name);
  }
  for (const auto& [name, array] : args) {
    request.shapes[name] = array.shape();
    request.dtypes[name] = array.dtype();
  }
  WEFT_CHECK(extension.append || extension.write_back.empty())
      << "Bind: write_back arguments without an extension that appends them";
  if (extension.append) {
    request.extend = [&](const Graph& g, const std::vector<std::string>& grad_args) {
      return Extend(g, grad_args, extension);
    };
  }
  request.num_write_backs = extension.write_back.size();
  request.precision = extension.precision;
  request.check_arguments = [&](const Graph& g, const std::vector<std::string>&) {
    CheckNames(g, args, arg_grads, grad_reqs);
    CheckArguments(g, device, args);
  };
  // After inference, which names a wrong argument before its right gradient array is blamed.
  request.check_types = [&](const Graph& g, const std::vector<std::string>& grad_args) {
    CheckGradients(g, grad_args, args, arg_grads);
    CheckWriteBacks(g, g.outputs().size() - extension.write_back.size(), extension.write_back,
                    args);
  };
  return RunBindPipeline(symbol.ToGraph(), request);
}

}  // namespace

std::unique_ptr<Executor> Executor::Bind(const Symbol& symbol, Device device, const ArrayMap& args,
                                         const ArrayMap& arg_grads,
                                         const std::map<std::string, GradReq>& grad_reqs,
                                         const GraphExtension& extension) {
  BindResult passes = BindGraph(symbol, device, args, arg_grads, grad_reqs, extension);
  const FusionStats fusion = passes.fusion;
  std::unique_ptr<Executor> exec(new Executor(std::make_unique<Impl>(
      std::move(passes), device, args, arg_grads, grad_reqs, extension.write_back)));
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

std::vector<std::string> Executor::MutatedArguments(const Symbol& symbol) {
  const Graph g = symbol.ToGraph();
  std::vector<std::string> names;
  for (const Node& node : g.nodes()) {
    if (node.op == nullptr) continue;
    for (int i : node.op->mutate_inputs) {
      const Node& input = g.node(node.inputs[i].node);
      if (input.op == nullptr && std::find(names.begin(), names.end(), input.name) == names.end())
        names.push_back(input.name);
    }
  }
  return names;
}

void Executor::Forward(bool is_train) {
  if (is_train && impl_->passes.folded_batch_norms > 0) {
    WEFT_THROW("Executor::Forward: a training forward of a graph bound for inference: "
               << impl_->passes.folded_batch_norms
               << " BatchNorm(s) were folded into their convolutions, which leaves no batch "
                  "statistics to compute; bind with a gradient, or with WEFT_FOLD_BATCH_NORM=0");
  }
  impl_->run.Push(Phase::kForward, is_train);
}

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
  stats.inference_cuda_graphs = run.inference_capture.recorded;
  stats.fused_groups = fused_groups_;
  stats.fused_nodes = fused_nodes_;
  stats.recomputed_nodes = recomputed_nodes_;
  return stats;
}

namespace {

// The plan's segments, as graph nodes (its invocations are the graph's op nodes, in order).
std::vector<DotSegment> Segments(const BoundGraph& plan) {
  std::vector<uint32_t> node_of;  // per invocation
  for (uint32_t n = 0; n < plan.graph().nodes().size(); ++n) {
    if (!plan.graph().node(n).is_variable()) node_of.push_back(n);
  }
  std::vector<DotSegment> segments;
  for (Phase phase : {Phase::kForward, Phase::kBackward}) {
    for (uint32_t s : plan.segments(phase)) {
      DotSegment& d = segments.emplace_back();
      d.backward = phase == Phase::kBackward;
      for (uint32_t i : plan.segment(s).nodes) d.nodes.push_back(node_of[i]);
    }
  }
  return segments;
}

}  // namespace

std::string Executor::ToDot(const std::string& after_pass) const {
  const BoundGraph& plan = impl_->plan;
  if (after_pass.empty()) return GraphToDot(plan.graph(), device_, "bound graph", Segments(plan));
  std::vector<std::string> ran;
  for (const BindResult::Pass& pass : impl_->passes.passes) {
    if (pass.name == after_pass) return GraphToDot(pass.graph, device_, "after " + after_pass);
    ran.push_back(pass.name);
  }
  WEFT_THROW("ToDot: no pass '" << Abbreviate(after_pass) << "' ran when binding; the passes that "
                                << "ran: " << QuotedList(ran) << DidYouMean(after_pass, ran));
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
