// The bind pipeline: the one place that says which passes binding runs (executor/executor.h's
// Bind), in what order, and the environment switch of each (on unless set to 0; another value
// than 0 or 1 is a weft::Error naming it):
//
//   pass                    switch                       runs
//   mixed_precision         WEFT_MIXED_PRECISION         when the request has a precision policy:
//                                                        casts to and from 16 bits
//                                                        (mixed_precision.h)
//   eliminate_common_expr   WEFT_ELIMINATE_COMMON_EXPR   always (passes/cse.h)
//   fold_norm_cast          WEFT_FOLD_NORM_CAST          where a Cast reads a LayerNorm: a Cast
//                                                        to 16 bits into the float32 LayerNorm
//                                                        before it (fold_norm_cast.h)
//   fold_batch_norm         WEFT_FOLD_BATCH_NORM         inference binds (no gradient, no
//                                                        extension): BatchNorm into Convolution
//   fold_activation         WEFT_FOLD_ACTIVATION         inference binds: an activation into the
//                                                        layer before it (an epilogue)
//   channels_last           WEFT_CHANNELS_LAST           CPU inference binds, and (unless
//                           WEFT_GPU_CHANNELS_LAST=0)    GPU binds that compute in 16 bits (a
//                                                        policy, or 16-bit arguments):
//                                                        convolutions and poolings on NHWC data
//                                                        (channels_last.h)
//   gradient                -                            when a gradient is requested
//   extend                  -                            the caller's nodes, then its checks
//   infer_shapes_and_types  -                            always, for the device; then the checks
//   fold_grad_cast          WEFT_FOLD_GRAD_CAST          with a gradient: a FullyConnected's
//                                                        16-bit parameter gradients widened by
//                                                        casts are written in float32 instead
//                                                        (fold_grad_cast.h)
//   pass_gradients_through  WEFT_PASS_GRADIENTS_THROUGH  with a gradient: drops the gradient
//                                                        nodes that change nothing
//                                                        (pass_gradients_through.h)
//   commute_moves           WEFT_COMMUTE_MOVES           inference binds: a transpose moved across
//                                                        the FullyConnected beside it, to join the
//                                                        movement chain on its other side
//                                                        (commute_moves.h); shapes inferred again
//   compose_moves           WEFT_COMPOSE_MOVES           inference binds: a chain of reshapes,
//                                                        transposes and slices read as one
//                                                        strided copy (compose_moves.h)
//   fold_attention_moves    WEFT_FOLD_ATTENTION_MOVES    inference binds: an Attention reads its
//                                                        operands' strided copies' sources and
//                                                        writes where the copy of its result
//                                                        would (fold_attention_moves.h); shapes
//                                                        inferred again
//   fold_sum                WEFT_FOLD_SUM                CPU inference binds: a residual add into
//                                                        the convolution before it (fold_sum.h)
//   fold_depthwise          WEFT_FOLD_DEPTHWISE          CPU inference binds: a 1x1 convolution
//                                                        into the depthwise one that reads it
//                                                        (fold_depthwise.h)
//   blocked_layout          WEFT_BLOCKED_LAYOUT          CPU binds: convolutions, poolings and
//                                                        BatchNorms on NCHW data hand each other
//                                                        blocked images (blocked_layout.h; an
//                                                        inference bind's are channels last)
//   fuse_pointwise          WEFT_USE_FUSION              when the device runs fused groups;
//                                                        recomputing forward values on GPUs only
//   write_backs_last        -                            when the extension writes arguments back
//   plan_memory             WEFT_PLAN_MEMORY             always; off: one buffer per entry. CPU
//                           WEFT_KEEP_STABLE             inference binds keep stable entries
//                                                        (stable_nodes.h) in buffers of their own
//
// The result keeps the graph after each pass that ran, for Executor::ToDot.
//
//   BindRequest request;
//   request.device = Device::Cpu();
//   request.differentiate = {"fc1_weight"};
//   request.shapes = {{"data", Shape{64, 784}}, ...};
//   BindResult bound = RunBindPipeline(symbol.ToGraph(), request);
//   bound.graph.memory() ... bound.grad_args ... bound.passes.back().name == "plan_memory"
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/device.h"
#include "graph/graph.h"
#include "passes/fuse_pointwise.h"
#include "passes/mixed_precision.h"

namespace weft {

struct BindRequest {
  Device device;
  // The arguments, by name, whose gradients are requested.
  std::set<std::string> differentiate;
  // Of the arguments bound (inference derives the rest where it can; dtypes default to float32).
  std::map<std::string, Shape> shapes;
  std::map<std::string, DType> dtypes;
  // A mixed-precision step's policy (mixed_precision.h), applied before the gradient pass.
  std::optional<PrecisionPolicy> precision;
  // Null or: the graph after the gradient pass, whose outputs are the forward outputs then the
  // gradients of `grad_args`, with nodes appended and `num_write_backs` outputs after the
  // gradients, each written back into an argument (executor.h's GraphExtension).
  std::function<Graph(const Graph&, const std::vector<std::string>& grad_args)> extend;
  size_t num_write_backs = 0;
  // Null or the caller's checks, which throw weft::Error: of the graph before inference (its
  // arguments), and of the typed graph after it.
  std::function<void(const Graph&, const std::vector<std::string>&grad_args)> check_arguments,
      check_types;
};

struct BindResult {
  struct Pass {
    const char* name;  // as in the table above
    Graph graph;       // after it
  };
  Graph graph;  // typed and planned (Graph::memory)
  // The arguments whose gradients are outputs, in order, after the forward outputs.
  std::vector<std::string> grad_args;
  FusionStats fusion;
  int casts = 0;  // casts the mixed_precision pass inserted
  // Casts folded into the LayerNorms before them (fold_norm_cast.h).
  int folded_norm_casts = 0;
  // FullyConnected backwards that write their parameter gradients in float32 (fold_grad_cast.h).
  int folded_grad_casts = 0;
  // BatchNorms folded into convolutions: the graph computes only inference (Forward with is_train
  // is an error).
  int folded_batch_norms = 0;
  // Activations folded into the FullyConnected before them (fold_activation.h).
  int folded_activations = 0;
  // Convolutions and poolings turned channels last (channels_last.h).
  int channels_last = 0;
  // FullyConnected layers a transpose moved across (commute_moves.h).
  int commuted_moves = 0;
  // Movement ops that became one read of their chain's first input (compose_moves.h).
  int composed_moves = 0;
  // Strided copies an Attention reads or writes through instead (fold_attention_moves.h).
  int folded_attention_moves = 0;
  // Sums folded into the convolutions before them (fold_sum.h).
  int folded_sums = 0;
  // Gradient nodes dropped because they passed their gradient through (pass_gradients_through.h).
  int gradients_passed_through = 0;
  // 1x1 convolutions folded into the depthwise convolutions after them (fold_depthwise.h).
  int folded_depthwise = 0;
  // Convolutions, poolings and BatchNorms (forward and backward) in the blocked layout
  // (blocked_layout.h).
  int blocked = 0;
  std::vector<Pass> passes;  // the passes that ran, in order
};

// Runs the pipeline on `graph` (a symbol's). Throws weft::Error from the passes and the checks.
BindResult RunBindPipeline(const Graph& graph, const BindRequest& request);

}  // namespace weft
