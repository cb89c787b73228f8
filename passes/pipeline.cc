#include "passes/pipeline.h"

#include <array>

#include "core/env.h"
#include "passes/blocked_layout.h"
#include "passes/channels_last.h"
#include "passes/commute_moves.h"
#include "passes/compose_moves.h"
#include "passes/cse.h"
#include "passes/fold_activation.h"
#include "passes/fold_attention_moves.h"
#include "passes/fold_batch_norm.h"
#include "passes/fold_depthwise.h"
#include "passes/fold_grad_cast.h"
#include "passes/fold_norm_cast.h"
#include "passes/fold_sum.h"
#include "passes/gradient.h"
#include "passes/infer.h"
#include "passes/pass_gradients_through.h"
#include "passes/plan_memory.h"
#include "passes/stable_nodes.h"
#include "passes/write_backs_last.h"

namespace weft {

namespace {

struct State {
  const BindRequest& request;
  BindResult& result;
};

// The argument nodes whose gradients are requested, in node order.
std::vector<uint32_t> WithRespectTo(const Graph& g, const BindRequest& request) {
  std::vector<uint32_t> wrt;
  for (uint32_t n : g.ArgumentNodes()) {
    if (request.differentiate.count(g.node(n).name) != 0) wrt.push_back(n);
  }
  return wrt;
}

// Whether the device's backend runs fused groups (every backend built with weft does; one that
// does not keeps its graphs unfused rather than failing to bind).
bool CanFuse(Device device) { return GetOp("_fused_pointwise").On(device.type).compute != nullptr; }

// Entries bound to user arrays: arguments (head gradients included) and every graph output.
std::vector<bool> ExternalEntries(const Graph& g) {
  std::vector<bool> external(g.num_entries(), false);
  for (uint32_t n : g.ArgumentNodes()) external[g.EntryId({n, 0})] = true;
  for (const NodeEntry& e : g.outputs()) external[g.EntryId(e)] = true;
  return external;
}

bool HasPolicy(const Graph&, const State& s) { return s.request.precision.has_value(); }
Graph Mix(const Graph& g, State& s) {
  return MixedPrecision(g, *s.request.precision, s.request.dtypes, &s.result.casts);
}

Graph Cse(const Graph& g, State&) { return EliminateCommonExpr(g); }
bool ReadsNormCast(const Graph& g, const State&) { return ReadsNormThroughCast(g); }
Graph FoldNormCasts(const Graph& g, State& s) {
  return FoldNormCast(g, s.request.dtypes, &s.result.folded_norm_casts);
}

// An inference bind: no gradient, no caller's nodes (a trainer's step has both).
bool Infers(const Graph& g, const State& s) {
  return WithRespectTo(g, s.request).empty() && !s.request.extend;
}
Graph FoldNorms(const Graph& g, State& s) { return FoldBatchNorm(g, &s.result.folded_batch_norms); }
Graph FoldActivations(const Graph& g, State& s) {
  return FoldActivation(g, &s.result.folded_activations);
}
// An inference bind on the CPU.
Graph Compose(const Graph& g, State& s) { return ComposeMoves(g, &s.result.composed_moves); }
bool InfersOnCpu(const Graph& g, const State& s) {
  return Infers(g, s) && !s.request.device.is_gpu();
}
// Whether a bind computes in 16 bits: a precision policy, or an argument bound as bfloat16 or
// float16.
bool Computes16Bit(const BindRequest& r) {
  if (r.precision) return true;
  for (const auto& [name, dtype] : r.dtypes) {
    if (Is16BitFloat(dtype)) return true;
  }
  return false;
}
// CPU inference binds (oneDNN's channels-last kernels); GPU binds that compute in 16 bits,
// training too (cuDNN's tensor-core convolutions and its persistent BatchNorm compute channels
// last: a ResNet-50 bfloat16 step is 35 ms so, 55 NCHW, bench/README.md), unless
// WEFT_GPU_CHANNELS_LAST=0.
bool ChannelsLastFits(const Graph& g, const State& s) {
  if (!s.request.device.is_gpu()) return Infers(g, s);
  return GetEnvBool("WEFT_GPU_CHANNELS_LAST", true) && Computes16Bit(s.request);
}
Graph ToChannelsLast(const Graph& g, State& s) { return ChannelsLast(g, &s.result.channels_last); }
Graph FoldSums(const Graph& g, State& s) { return FoldSum(g, &s.result.folded_sums); }
Graph FoldDepthwises(const Graph& g, State& s) {
  return FoldDepthwise(g, &s.result.folded_depthwise);
}

bool Differentiates(const Graph& g, const State& s) { return !WithRespectTo(g, s.request).empty(); }
// A CPU bind (an inference bind's windows are channels last by now, which the pass leaves alone,
// unless WEFT_CHANNELS_LAST=0).
bool OnCpu(const Graph&, const State& s) { return !s.request.device.is_gpu(); }
Graph Block(const Graph& g, State& s) { return BlockedLayout(g, &s.result.blocked); }
Graph Differentiate(const Graph& g, State& s) {
  const std::vector<uint32_t> wrt = WithRespectTo(g, s.request);
  for (uint32_t n : wrt) s.result.grad_args.push_back(g.node(n).name);
  return Gradient(g, wrt);
}

Graph Extend(const Graph& g, State& s) {
  const Graph out = s.request.extend ? s.request.extend(g, s.result.grad_args) : g;
  if (s.request.check_arguments) s.request.check_arguments(out, s.result.grad_args);
  return out;
}

Graph Infer(const Graph& g, State& s) {
  const Graph typed =
      InferShapesAndTypes(g, s.request.shapes, s.request.dtypes, s.request.device.type);
  if (s.request.check_types) s.request.check_types(typed, s.result.grad_args);
  return typed;
}

// Moved layers and transposes have new shapes: inferred again, as the request says.
Graph Commute(const Graph& g, State& s) {
  const Graph moved = CommuteMoves(g, &s.result.commuted_moves);
  return s.result.commuted_moves > 0 ? Infer(moved, s) : moved;
}
// A folded Attention's log-sum-exp may cut its heads otherwise: inferred again.
Graph FoldAttentions(const Graph& g, State& s) {
  const Graph folded = FoldAttentionMoves(g, &s.result.folded_attention_moves);
  return s.result.folded_attention_moves > 0 ? Infer(folded, s) : folded;
}

bool Fuses(const Graph&, const State& s) { return CanFuse(s.request.device); }
Graph Fuse(const Graph& g, State& s) {
  return FusePointwise(g, &s.result.fusion, /*recompute=*/s.request.device.is_gpu());
}

Graph FoldGradCasts(const Graph& g, State& s) {
  return FoldGradCast(g, &s.result.folded_grad_casts);
}

Graph PassThrough(const Graph& g, State& s) {
  return PassGradientsThrough(g, &s.result.gradients_passed_through);
}

bool WritesBack(const Graph&, const State& s) { return s.request.num_write_backs > 0; }
Graph MoveWriteBacks(const Graph& g, State& s) {
  return WriteBacksLast(g, g.outputs().size() - s.request.num_write_backs);
}

// Inference binds keep stable entries in buffers of their own (stable_nodes.h): the executor
// computes them again only when their arguments change (on a GPU outside the CUDA graphs its
// inference forwards replay).
Graph Plan(const Graph& g, State& s) {
  std::vector<bool> external = ExternalEntries(g);
  if (Infers(g, s) && GetEnvBool("WEFT_KEEP_STABLE", true)) {
    const std::vector<bool> stable = StableEntries(g);
    for (size_t e = 0; e < external.size(); ++e) external[e] = external[e] || stable[e];
  }
  return PlanMemory(g, external);
}
Graph PlanNaive(const Graph& g, State&) {
  return PlanMemory(g, ExternalEntries(g), {.reuse = false, .inplace = false});
}

struct PassRow {
  const char* name;
  const char* env;                              // its switch; null: none
  bool (*applies)(const Graph&, const State&);  // null: always
  Graph (*on)(const Graph&, State&);
  Graph (*off)(const Graph&, State&);  // what runs instead when switched off; null: nothing
};

// The pipeline: the table in pipeline.h.
constexpr std::array<PassRow, 20> kBindPasses = {{
    {"mixed_precision", "WEFT_MIXED_PRECISION", HasPolicy, Mix, nullptr},
    {"eliminate_common_expr", "WEFT_ELIMINATE_COMMON_EXPR", nullptr, Cse, nullptr},
    {"fold_norm_cast", "WEFT_FOLD_NORM_CAST", ReadsNormCast, FoldNormCasts, nullptr},
    {"fold_batch_norm", "WEFT_FOLD_BATCH_NORM", Infers, FoldNorms, nullptr},
    {"fold_activation", "WEFT_FOLD_ACTIVATION", Infers, FoldActivations, nullptr},
    {"channels_last", "WEFT_CHANNELS_LAST", ChannelsLastFits, ToChannelsLast, nullptr},
    {"gradient", nullptr, Differentiates, Differentiate, nullptr},
    {"extend", nullptr, nullptr, Extend, nullptr},
    {"infer_shapes_and_types", nullptr, nullptr, Infer, nullptr},
    {"fold_grad_cast", "WEFT_FOLD_GRAD_CAST", Differentiates, FoldGradCasts, nullptr},
    {"pass_gradients_through", "WEFT_PASS_GRADIENTS_THROUGH", Differentiates, PassThrough, nullptr},
    {"commute_moves", "WEFT_COMMUTE_MOVES", Infers, Commute, nullptr},
    {"compose_moves", "WEFT_COMPOSE_MOVES", Infers, Compose, nullptr},
    {"fold_attention_moves", "WEFT_FOLD_ATTENTION_MOVES", Infers, FoldAttentions, nullptr},
    {"fold_sum", "WEFT_FOLD_SUM", InfersOnCpu, FoldSums, nullptr},
    {"fold_depthwise", "WEFT_FOLD_DEPTHWISE", InfersOnCpu, FoldDepthwises, nullptr},
    {"blocked_layout", "WEFT_BLOCKED_LAYOUT", OnCpu, Block, nullptr},
    {"fuse_pointwise", "WEFT_USE_FUSION", Fuses, Fuse, nullptr},
    {"write_backs_last", nullptr, WritesBack, MoveWriteBacks, nullptr},
    {"plan_memory", "WEFT_PLAN_MEMORY", nullptr, Plan, PlanNaive},
}};

}  // namespace

BindResult RunBindPipeline(const Graph& graph, const BindRequest& request) {
  BindResult result;
  State state{request, result};
  Graph g = graph;
  for (const PassRow& row : kBindPasses) {
    const bool on = row.env == nullptr || GetEnvBool(row.env, true);
    if (row.applies != nullptr && !row.applies(g, state)) continue;
    Graph (*run)(const Graph&, State&) = on ? row.on : row.off;
    if (run == nullptr) continue;
    g = run(g, state);
    result.passes.push_back({row.name, g});
  }
  result.graph = g;
  return result;
}

}  // namespace weft
