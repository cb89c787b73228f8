#include "executor/executor.h"

#include <algorithm>
#include <sstream>

#include "core/env.h"
#include "core/error.h"
#include "core/small_vector.h"
#include "engine/engine.h"
#include "executor/internal/binding.h"
#include "passes/cse.h"
#include "passes/gradient.h"
#include "passes/infer.h"
#include "passes/plan_memory.h"

namespace weft {

namespace {

// The graph the executor runs: forward, CSE'd, with the backward graph for requested gradients.
Graph BuildGraph(const Symbol& symbol, const std::map<std::string, GradReq>& reqs, std::vector<std::string>& grad_args) {
  Graph g = symbol.ToGraph();
  if (GetEnvBool("WEFT_ELIMINATE_COMMON_EXPR", true)) g = EliminateCommonExpr(g);
  std::vector<uint32_t> wrt;
  for (uint32_t n : g.ArgumentNodes()) {
    auto it = reqs.find(g.nodes[n].name);
    if (it != reqs.end() && it->second != GradReq::kNull) {
      wrt.push_back(n);
      grad_args.push_back(g.nodes[n].name);
    }
  }
  return wrt.empty() ? g : Gradient(g, wrt);
}

std::string Names(const Graph& g) {
  std::ostringstream os;
  for (uint32_t n : g.ArgumentNodes()) {
    if (std::count(g.head_grads.begin(), g.head_grads.end(), n) == 0) os << (os.tellp() > 0 ? ", " : "") << g.nodes[n].name;
  }
  return os.str();
}

void CheckArguments(const Graph& g, Device device, const Executor::ArrayMap& args) {
  for (uint32_t n : g.ArgumentNodes()) {
    if (std::count(g.head_grads.begin(), g.head_grads.end(), n)) continue;
    const std::string& name = g.nodes[n].name;
    auto it = args.find(name);
    if (it == args.end() || it->second.is_none()) {
      WEFT_THROW("Bind: argument '" << name << "' is missing; expected arrays for: " << Names(g));
    }
    if (it->second.device() != device) {
      WEFT_THROW("Bind: argument '" << name << "' is on " << it->second.device() << ", expected " << device);
    }
  }
}

void CheckGradients(const Graph& g, const std::vector<std::string>& grad_args, const Executor::ArrayMap& args,
                    const Executor::ArrayMap& grads) {
  for (const std::string& name : grad_args) {
    auto it = grads.find(name);
    if (it == grads.end() || it->second.is_none()) {
      WEFT_THROW("Bind: a gradient is requested for '" << name << "' but no gradient array was given");
    }
    const NDArray& arg = args.at(name);
    if (it->second.shape() != arg.shape() || it->second.dtype() != arg.dtype() || it->second.device() != arg.device()) {
      WEFT_THROW("Bind: gradient of '" << name << "' must be " << arg.shape() << " " << arg.dtype() << " on "
                                       << arg.device() << ", found " << it->second.ToString());
    }
  }
}

}  // namespace

struct Executor::Impl {
  Binding binding;
};

Executor::Executor(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Executor::~Executor() {
  // Pushed ops refer to this executor's bindings: let them finish first.
  try {
    engine::Engine::Get()->WaitForAll();
  } catch (const std::exception&) {
    // Their errors were the caller's to wait for; the executor only needs them done.
  }
}

std::unique_ptr<Executor> Executor::Bind(const Symbol& symbol, Device device, const ArrayMap& args,
                                         const ArrayMap& arg_grads, const std::map<std::string, GradReq>& grad_reqs) {
  std::vector<std::string> grad_args;
  Graph g = BuildGraph(symbol, grad_reqs, grad_args);
  CheckArguments(g, device, args);
  CheckGradients(g, grad_args, args, arg_grads);
  std::map<std::string, Shape> shapes;
  std::map<std::string, DType> dtypes;
  for (const auto& [name, array] : args) shapes[name] = array.shape(), dtypes[name] = array.dtype();
  g = InferShapesAndTypes(std::move(g), shapes, dtypes);
  auto impl = std::make_unique<Impl>();
  impl->binding = Binding::Create(std::move(g), device, args, arg_grads, grad_args, grad_reqs);
  std::unique_ptr<Executor> exec(new Executor(std::move(impl)));
  exec->symbol_ = symbol;
  exec->device_ = device;
  exec->args_ = args;
  exec->arg_grads_ = arg_grads;
  exec->grad_reqs_ = grad_reqs;
  exec->outputs_ = exec->impl_->binding.forward_outputs();
  exec->stats_.forward_nodes = exec->impl_->binding.NumNodes(/*backward=*/false);
  exec->stats_.backward_nodes = exec->impl_->binding.NumNodes(/*backward=*/true);
  exec->stats_.plan_bytes = exec->impl_->binding.graph().memory->total_bytes;
  exec->stats_.naive_bytes = exec->impl_->binding.graph().memory->naive_bytes;
  return exec;
}

void Executor::Forward(bool is_train) { stats_.engine_ops_pushed = impl_->binding.Push(/*backward=*/false, is_train); }

void Executor::Backward(const std::vector<NDArray>& head_grads) {
  Binding& b = impl_->binding;
  if (b.NumNodes(/*backward=*/true) == 0 && b.head_grads().empty()) {
    WEFT_THROW("Backward: no gradient was requested when the executor was bound (every grad_req is null)");
  }
  if (!head_grads.empty() && head_grads.size() != b.head_grads().size()) {
    WEFT_THROW("Backward: expected " << b.head_grads().size() << " head gradient(s), one per output, found " << head_grads.size());
  }
  // Ones by default: filled once and kept (head gradients are external to the memory plan, so
  // nothing overwrites them) until the caller passes its own.
  for (size_t i = 0; i < b.head_grads().size(); ++i) {
    if (!head_grads.empty()) {
      head_grads[i].CopyTo(b.head_grads()[i]);
    } else if (!head_grads_are_ones_) {
      b.head_grads()[i].Fill(1.0);
    }
  }
  head_grads_are_ones_ = head_grads.empty();
  stats_.engine_ops_pushed = b.Push(/*backward=*/true, /*is_train=*/true);
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
