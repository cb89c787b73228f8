// Executor: a symbol bound to a device and to arrays. Bind runs the bind pipeline
// (passes/pipeline.h: CSE, gradient, the GraphExtension's nodes, shape and type inference,
// pointwise fusion, write-backs last, memory planning), allocates the plan's buffers, and prepares
// one engine op per node (or per segment of consecutive nodes: bulk execution): a description
// computed once and never changed (internal/bound_graph.h). Forward and Backward push it through
// the executor's run (internal/graph_run.h), which holds all per-run state, statistics included.
// ToDot draws what Bind made.
//
//   auto exec = Executor::Bind(loss, Device::Cpu(), args, arg_grads, grad_reqs);
//   exec->Forward(/*is_train=*/true);
//   exec->Backward();                 // a loss: head gradients of ones
//   optimizer.Update(i, args["fc1_weight"], arg_grads["fc1_weight"]);
//
// Arrays are bound by argument name (Symbol::ListArguments). A gradient request per argument:
// kWrite (overwrite the gradient array), kAdd (accumulate into it), kNull (not computed; work only
// it needs is pruned). Environment: each pass's switch (passes/pipeline.h:
// WEFT_ELIMINATE_COMMON_EXPR, WEFT_USE_FUSION, WEFT_PLAN_MEMORY; =0 turns it off), and
// WEFT_EXEC_BULK_SIZE, how many consecutive nodes run as one engine op (1: one op per node).
//
// A GraphExtension appends nodes after the gradient pass (weft::Trainer appends gradient clipping
// and the optimizer's updates), so that fusion, memory planning and bulk execution see them with
// the rest, and Backward runs them after the gradients.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/symbol.h"
#include "passes/mixed_precision.h"
#include "storage/ndarray.h"

namespace weft {

enum class GradReq { kNull, kWrite, kAdd };

// Nodes appended to the graph Bind runs, after the gradient pass and before inference, fusion and
// memory planning.
struct GraphExtension {
  // Gets the graph after the gradient pass (its forward outputs, then the gradient of each of
  // `grad_args`, argument names, in that order) and returns it with nodes appended and one output
  // appended per `write_back` name. Appended op nodes must be backward nodes (forward_node set):
  // Backward runs them. Appended variables are arguments, bound by name like the others.
  std::function<Graph(const Graph& graph, const std::vector<std::string>& grad_args)> append;
  // Per appended output, in order: the argument it is written into, in place (an optimizer
  // update's new weight), which must match it in shape and dtype. No node may read the output:
  // Bind moves these nodes after every other node (passes/write_backs_last.h), in their order, so
  // that every other reader of the arguments they write runs before them.
  std::vector<std::string> write_back;
  // A mixed-precision step's policy: Bind runs passes/mixed_precision.h before the gradient pass.
  std::optional<PrecisionPolicy> precision;
};

struct ExecutorStats {
  // Of the bound graph:
  size_t forward_nodes = 0;   // nodes the forward pass runs
  size_t backward_nodes = 0;  // nodes the backward pass runs
  size_t plan_bytes = 0;      // internal buffers the memory plan allocated
  size_t naive_bytes = 0;     // what one buffer per internal entry would need
  size_t fused_groups = 0;    // fused nodes the fusion pass made (passes/fuse_pointwise.h)
  size_t fused_nodes = 0;     // the nodes they replace
  size_t recomputed_nodes =
      0;  // forward nodes the backward recomputes instead of reading (passes/rematerialize.h)
  // Of the run:
  size_t engine_ops_pushed = 0;  // by the last Forward, Backward or TrainStep call
  // A captured TrainStep (GPU): its groups of segments, the segments pushed on their own between
  // them (Op::capture_barrier), and the groups that replay a CUDA graph now.
  size_t capture_groups = 0, capture_barriers = 0, cuda_graphs = 0;
  // A captured inference Forward(false) (GPU): the groups that replay a CUDA graph now.
  size_t inference_cuda_graphs = 0;
};

class Executor {
 public:
  using ArrayMap = std::map<std::string, NDArray>;

  // Throws weft::Error naming the argument when one is missing or its shape or device is wrong
  // (arguments are checked before their gradient arrays), naming the node when inference fails,
  // and for a name in `args`, `arg_grads` or `grad_reqs` that is not an argument of the graph
  // (listing those, with the closest as "did you mean"), and for a write_back argument whose
  // array does not match the output written into it.
  static std::unique_ptr<Executor> Bind(const Symbol& symbol, Device device, const ArrayMap& args,
                                        const ArrayMap& arg_grads = {},
                                        const std::map<std::string, GradReq>& grad_reqs = {},
                                        const GraphExtension& extension = {});
  // The arguments of `symbol` that a node reads on the host (Op::host_inputs: an RNN's
  // sequence_length): Bind takes them as CPU arrays whatever the device.
  static std::vector<std::string> HostArguments(const Symbol& symbol);
  // The arguments of `symbol` that one of its ops updates in place (Op::mutate_inputs:
  // BatchNorm's running mean and variance): state the graph keeps, not parameters to train.
  static std::vector<std::string> MutatedArguments(const Symbol& symbol);
  // Waits for the engine ops this executor pushed, and for nothing else; reports no error (an
  // error of its ops stays on the arrays they wrote, for their WaitToRead and WaitForAll).
  ~Executor();

  // On a GPU, inference forwards after the first two replay CUDA graphs, as TrainStep's do (the
  // stable nodes, such as BatchNorm folded into a convolution's weight, run outside them, only
  // when their arguments changed); WEFT_CUDA_GRAPH=0 turns that off.
  void Forward(bool is_train);
  // head_grads: one per output; empty: ones (the outputs are losses to minimize). Runs the
  // backward nodes, then those of the extension. Each given array is copied into the
  // executor's own (head_grads()), unless it is that array: write the gradients into
  // head_grads() and pass them to skip the copy.
  void Backward(const std::vector<NDArray>& head_grads = {});
  // The arrays the backward nodes read the head gradients from, one per output.
  const std::vector<NDArray>& head_grads() const;

  // Forward(true) then Backward() from head gradients of ones, as one training step. On a GPU the
  // steps after the first two are recorded once into CUDA graphs and replayed (the bound graph's
  // nodes and arrays never change); WEFT_CUDA_GRAPH=0 turns that off. Ops that a graph cannot
  // record (Op::capture_barrier) run between the graphs; a recording that fails runs its part as
  // before, with one warning. Results are those of Forward and Backward, bit for bit.
  void TrainStep();

  const std::vector<NDArray>& outputs() const { return outputs_; }
  const ArrayMap& args() const { return args_; }
  const ArrayMap& arg_grads() const { return arg_grads_; }
  ExecutorStats stats() const;
  // What Bind made, as Graphviz DOT (render it with `dot -Tsvg`): the bound graph, its segments
  // (nodes one engine op runs) as dashed clusters, each fused node as a cluster of its steps,
  // each edge with the buffer the memory plan gave its value and its shape, the device in the
  // title. With a pass's name (passes/pipeline.h: "eliminate_common_expr", "fuse_pointwise", ...)
  // the graph as that pass left it. Throws weft::Error, listing the passes that ran, for a pass
  // that did not run.
  std::string ToDot(const std::string& after_pass = "") const;

  // The same symbol bound again for new argument shapes (e.g. another batch size): arguments
  // whose shape is unchanged keep their arrays (and gradients); the others get new arrays.
  std::unique_ptr<Executor> Reshape(const std::map<std::string, Shape>& shapes) const;

 private:
  struct Impl;
  explicit Executor(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;  // the bound graph and its run
  Symbol symbol_;
  Device device_;
  ArrayMap args_, arg_grads_;
  std::map<std::string, GradReq> grad_reqs_;
  GraphExtension extension_;
  std::vector<NDArray> outputs_;
  size_t fused_groups_ = 0, fused_nodes_ = 0, recomputed_nodes_ = 0;
};

}  // namespace weft
