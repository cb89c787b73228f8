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
    if (std::count(g.head_grads().begin(), g.head_grads().end(), n) == 0) names.push_back(g.node(n).name);
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
                        << "' is not an argument of the graph; the graph's arguments are " << QuotedList(known)
                        << DidYouMean(name, known));
  };
  for (const auto& [name, array] : args) check("argument", name);
  for (const auto& [name, array] : grads) check("gradient array", name);
  for (const auto& [name, req] : reqs) check("gradient request", name);
}

void CheckArguments(const Graph& g, Device device, const Executor::ArrayMap& args) {
  for (uint32_t n : g.ArgumentNodes()) {
    if (std::count(g.head_grads().begin(), g.head_grads().end(), n)) continue;
    const std::string& name = g.node(n).name;
    auto it = args.find(name);
    if (it == args.end() || it->second.is_none()) {
      WEFT_THROW("Bind: argument '" << Abbreviate(name) << "' is missing; expected arrays for: " << Names(g));
    }
    if (it->second.device() != device) {
      WEFT_THROW("Bind: argument '" << Abbreviate(name) << "' is on " << it->second.device() << ", expected "
                                    << device);
    }
  }
}

void CheckGradients(const Graph& g, const std::vector<std::string>& grad_args, const Executor::ArrayMap& args,
                    const Executor::ArrayMap& grads) {
  for (const std::string& name : grad_args) {
    auto it = grads.find(name);
    if (it == grads.end() || it->second.is_none()) {
      WEFT_THROW("Bind: a gradient is requested for '" << Abbreviate(name) << "' but no gradient array was given");
    }
    const NDArray& arg = args.at(name);
    if (it->second.shape() != arg.shape() || it->second.dtype() != arg.dtype() || it->second.device() != arg.device()) {
      WEFT_THROW("Bind: gradient of '" << Abbreviate(name) << "' must be " << arg.shape() << " " << arg.dtype()
                                       << " on " << arg.device() << ", found " << it->second.ToString());
    }
  }
}

// Whether the device's backend runs fused groups (every backend built with weft does; one that
// does not keeps its graphs unfused rather than failing to bind).
bool CanFuse(Device device) {
  return GetOp("_fused_pointwise").compute[static_cast<int>(device.type)] != nullptr;
}

}  // namespace

struct Executor::Impl {
  Impl(const Graph& graph, Device device, const ArrayMap& args, const ArrayMap& arg_grads,
       const std::vector<std::string>& grad_args, const std::map<std::string, GradReq>& grad_reqs)
      : plan(graph, device, args, arg_grads, grad_args, grad_reqs), run(plan) {}
  const BoundGraph plan;  // computed once by Bind
  GraphRun run;           // destroyed first: waits for what it pushed
};

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Executor::~Executor() = default;

std::unique_ptr<Executor> Executor::Bind(const Symbol& symbol, Device device, const ArrayMap& args,
                                         const ArrayMap& arg_grads, const std::map<std::string, GradReq>& grad_reqs) {
  std::vector<std::string> grad_args;
  Graph g = BuildGraph(symbol, grad_reqs, grad_args);
  CheckNames(g, args, arg_grads, grad_reqs);
  CheckArguments(g, device, args);
  std::map<std::string, Shape> shapes;
  std::map<std::string, DType> dtypes;
  for (const auto& [name, array] : args) shapes[name] = array.shape(), dtypes[name] = array.dtype();
  g = InferShapesAndTypes(g, shapes, dtypes, device.type);  // a wrong argument is named here, before its gradient
  CheckGradients(g, grad_args, args, arg_grads);
  FusionStats fusion;
  if (GetEnvBool("WEFT_USE_FUSION", true) && CanFuse(device)) g = FusePointwise(g, &fusion);
  std::unique_ptr<Executor> exec(
      new Executor(std::make_unique<Impl>(g, device, args, arg_grads, grad_args, grad_reqs)));
  exec->symbol_ = symbol;
  exec->device_ = device;
  exec->args_ = args;
  exec->arg_grads_ = arg_grads;
  exec->grad_reqs_ = grad_reqs;
  exec->outputs_ = exec->impl_->plan.forward_outputs();
  exec->fused_groups_ = fusion.groups;
  exec->fused_nodes_ = fusion.fused_nodes;
  exec->recomputed_nodes_ = fusion.recomputed;
  return exec;
}

void Executor::Forward(bool is_train) { impl_->run.Push(Phase::kForward, is_train); }

void Executor::Backward(const std::vector<NDArray>& head_grads) {
  const BoundGraph& plan = impl_->plan;
  if (plan.NumNodes(Phase::kBackward) == 0 && plan.head_grads().empty()) {
    WEFT_THROW("Backward: no gradient was requested when the executor was bound (every grad_req is null)");
  }
  if (!head_grads.empty() && head_grads.size() != plan.head_grads().size()) {
    WEFT_THROW("Backward: expected " << plan.head_grads().size() << " head gradient(s), one per output, found "
                                     << head_grads.size());
  }
  impl_->run.SetHeadGrads(head_grads);
  impl_->run.Push(Phase::kBackward, /*is_train=*/true);
}

ExecutorStats Executor::stats() const {
  const BoundGraph& plan = impl_->plan;
  ExecutorStats stats;
  stats.forward_nodes = plan.NumNodes(Phase::kForward);
  stats.backward_nodes = plan.NumNodes(Phase::kBackward);
  stats.plan_bytes = plan.graph().memory().total_bytes;
  stats.naive_bytes = plan.graph().memory().naive_bytes;
  stats.engine_ops_pushed = impl_->run.stats().engine_ops_pushed;
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
  return Bind(symbol_, device_, args, grads, grad_reqs_);
}

}  // namespace weft
