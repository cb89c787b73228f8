#include "ops/gpu/internal/cudnn_attention.h"

#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "ops/gpu/internal/cudnn_backend.h"

namespace weft::gpu {
namespace {

// The graphs' non-virtual tensors (the variant pack's ids).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kOutGrad,
  kDq,
  kDk,
  kDv,
  kSoftmaxSum,
  kDqAccum,
  kOne,
};

// The oldest cuDNN whose runtime fusion engines run these graphs as flash attention.
constexpr int kMinCudnnVersion = 90000;

// One call's tensors as cuDNN reads them: (B, H, T, C) with the call's strides (dense, or parts
// of a packed qkv (B, T, 3, H, D) and an out of (B, T, H, Dv)); k and v also transposed, (B, H,
// C, Tk), through their strides. The gradients of q, k and v have their strides, out_grad out's.
struct Shapes {
  Dims4 q, q_strides, k, k_strides, k_t, k_t_strides, v, v_strides, v_t, v_t_strides, out,
      out_strides, scores, rows;
};

Dims4 StridesOf(const AttentionRows& r) { return {r.b, r.h, r.t, 1}; }
Dims4 TransposedStridesOf(const AttentionRows& r) { return {r.b, r.h, 1, r.t}; }

Shapes ShapesOf(const AttentionDims& d) {
  return {{d.b, d.h, d.tq, d.d},    StridesOf(d.q),         {d.b, d.h, d.tk, d.d},
          StridesOf(d.k),           {d.b, d.h, d.d, d.tk},  TransposedStridesOf(d.k),
          {d.b, d.h, d.tk, d.dv},   StridesOf(d.v),         {d.b, d.h, d.dv, d.tk},
          TransposedStridesOf(d.v), {d.b, d.h, d.tq, d.dv}, StridesOf(d.out),
          {d.b, d.h, d.tq, d.tk},   {d.b, d.h, d.tq, 1}};
}

cudnnBackendDescriptor_t Dense(BackendGraph& g, int64_t uid, cudnnDataType_t type,
                               const Dims4& dims) {
  return g.Tensor({uid, type, dims, DenseStrides(dims)});
}
cudnnBackendDescriptor_t Scores(BackendGraph& g, const Shapes& s) {
  return g.Virtual(CUDNN_DATA_FLOAT, s.scores, DenseStrides(s.scores));
}
cudnnBackendDescriptor_t PerRow(BackendGraph& g, const Shapes& s) {
  return g.Virtual(CUDNN_DATA_FLOAT, s.rows, DenseStrides(s.rows));
}
// A (B, H, Tk, Tq) view of (B, H, Tq, Tk) scores, in the data's type (cudnn-frontend's P^T, dS^T).
cudnnBackendDescriptor_t ScoresTransposed(BackendGraph& g, const AttentionDims& d,
                                          cudnnDataType_t io) {
  return g.Virtual(io, {d.b, d.h, d.tk, d.tq}, {d.h * d.tq * d.tk, d.tq * d.tk, 1, d.tk});
}

// s with `fill` (-inf) where key j > query i: cudnn-frontend's composite diagonal band mask
// (generated row and column indices, row >= column, select).
cudnnBackendDescriptor_t CausalMask(BackendGraph& g, const Shapes& sh, cudnnBackendDescriptor_t s,
                                    cudnnBackendDescriptor_t fill) {
  const Dims4 strides = DenseStrides(sh.scores);
  const auto row = g.Virtual(CUDNN_DATA_INT32, sh.scores, strides);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s, row, nullptr, nullptr, CUDNN_DATA_FLOAT, 2);
  const auto col = g.Virtual(CUDNN_DATA_INT32, sh.scores, strides);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, s, col, nullptr, nullptr, CUDNN_DATA_FLOAT, 3);
  const auto keep = g.Virtual(CUDNN_DATA_BOOLEAN, sh.scores, strides);
  g.Pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, CUDNN_DATA_BOOLEAN);
  const auto masked = Scores(g, sh);
  g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, s, masked, fill, keep);
  return masked;
}

// out = softmax(scale * q k^T, causal) v and stats = max + log(sum exp(s - max)) per query:
// cudnn-frontend's composite SDPA forward with its composite softmax.
void ForwardGraph(BackendGraph& g, const AttentionDims& d, cudnnDataType_t io) {
  const Shapes sh = ShapesOf(d);
  const auto q = g.Tensor({kQ, io, sh.q, sh.q_strides});
  const auto k_t = g.Tensor({kK, io, sh.k_t, sh.k_t_strides});
  const auto v = g.Tensor({kV, io, sh.v, sh.v_strides});
  const auto s = Scores(g, sh);
  g.Matmul(q, k_t, s);
  auto scaled = Scores(g, sh);
  g.Pointwise(CUDNN_POINTWISE_MUL, s, scaled, g.Scalar(kScale));
  if (d.causal) scaled = CausalMask(g, sh, scaled, g.Scalar(kNegInf));
  const auto max = PerRow(g, sh), shifted = Scores(g, sh), e = Scores(g, sh);
  g.Reduction(CUDNN_REDUCE_TENSOR_MAX, scaled, max);
  g.Pointwise(CUDNN_POINTWISE_SUB, scaled, shifted, max);
  g.Pointwise(CUDNN_POINTWISE_EXP, shifted, e);
  const auto sum = PerRow(g, sh), log = PerRow(g, sh);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  g.Pointwise(CUDNN_POINTWISE_LOG, sum, log);
  g.Pointwise(CUDNN_POINTWISE_ADD, max, Dense(g, kStats, CUDNN_DATA_FLOAT, sh.rows), log);
  // The probabilities in the data's type: cuDNN's engines take the second matmul's A operand in
  // the i/o type only (cudnn-frontend sets it so; a float P gets no engine configuration).
  const auto p = g.Virtual(io, sh.scores, DenseStrides(sh.scores));
  g.Pointwise(CUDNN_POINTWISE_DIV, e, p, sum);
  g.Matmul(p, v, g.Tensor({kO, io, sh.out, sh.out_strides}));
}

// d_q, d_k, d_v from q, k, v, out, out_grad and stats: cudnn-frontend's composite SDPA backward
// (cuDNN 9: dQ accumulated in float in the workspace, then converted; softmax_sum =
// rowsum(out_grad * out) in the workspace too).
void BackwardGraph(BackendGraph& g, const AttentionDims& d, cudnnDataType_t io) {
  const Shapes sh = ShapesOf(d);
  const auto q = g.Tensor({kQ, io, sh.q, sh.q_strides});
  const auto k_t = g.Tensor({kK, io, sh.k_t, sh.k_t_strides});
  const auto v_t = g.Tensor({kV, io, sh.v_t, sh.v_t_strides});
  const auto out = g.Tensor({kO, io, sh.out, sh.out_strides}),
             dy = g.Tensor({kOutGrad, io, sh.out, sh.out_strides});
  const auto stats = Dense(g, kStats, CUDNN_DATA_FLOAT, sh.rows), scale = g.Scalar(kScale);
  const auto dy_out = g.Virtual(CUDNN_DATA_FLOAT, sh.out, DenseStrides(sh.out));
  const auto row_sum = PerRow(g, sh),
             softmax_sum = Dense(g, kSoftmaxSum, CUDNN_DATA_FLOAT, sh.rows);
  g.Pointwise(CUDNN_POINTWISE_MUL, dy, dy_out, out);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, dy_out, row_sum);
  g.Pointwise(CUDNN_POINTWISE_MUL, row_sum, softmax_sum, g.Scalar(kOne));
  const auto s = Scores(g, sh), scaled = Scores(g, sh);
  g.Matmul(q, k_t, s);
  g.Pointwise(CUDNN_POINTWISE_MUL, s, scaled, scale);
  auto shifted = Scores(g, sh);
  g.Pointwise(CUDNN_POINTWISE_SUB, scaled, shifted, stats);
  if (d.causal) shifted = CausalMask(g, sh, shifted, g.Scalar(kNegInf));
  const auto p = Scores(g, sh), p_t = ScoresTransposed(g, d, io);
  g.Pointwise(CUDNN_POINTWISE_EXP, shifted, p);
  g.Reshape(p, p_t);
  g.Matmul(p_t, dy, g.Tensor({kDv, io, sh.v, sh.v_strides}));
  const auto dp = Scores(g, sh), centered = Scores(g, sh), ds_unscaled = Scores(g, sh);
  g.Matmul(dy, v_t, dp);
  g.Pointwise(CUDNN_POINTWISE_SUB, dp, centered, softmax_sum);
  g.Pointwise(CUDNN_POINTWISE_MUL, centered, ds_unscaled, p);
  const auto ds = Scores(g, sh), ds_t = ScoresTransposed(g, d, io);
  g.Pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, ds, scale);
  g.Reshape(ds, ds_t);
  g.Matmul(ds_t, q, g.Tensor({kDk, io, sh.k, sh.k_strides}));
  // k (B, H, Tk, D) with its own strides, from k^T: cudnn-frontend's reshape_k (float, as it
  // infers the type)
  const auto k = g.Virtual(CUDNN_DATA_FLOAT, sh.k, sh.k_strides);
  g.Reshape(k_t, k);
  const auto dq_accum = Dense(g, kDqAccum, CUDNN_DATA_FLOAT, sh.q);
  g.Matmul(ds, k, dq_accum);
  g.Pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, g.Tensor({kDq, io, sh.q, sh.q_strides}));
}

// Everything a plan depends on: the handle it was built for, dtype, scale, causal, the direction
// (true: backward), and the extents and strides (ExtentsOf).
using PlanKey = std::tuple<cudnnHandle_t, int, double, bool, bool, std::vector<int64_t>>;

std::vector<int64_t> ExtentsOf(const AttentionDims& d) {
  std::vector<int64_t> e = {d.b, d.h, d.tq, d.tk, d.d, d.dv};
  for (const AttentionRows& r : {d.q, d.k, d.v, d.out}) e.insert(e.end(), {r.b, r.h, r.t});
  return e;
}

// A key's plan, or why cuDNN declined it; immutable once stored.
struct PlanEntry {
  std::unique_ptr<BackendPlan> plan;
  std::string declined;
};

Mutex plans_mu;
NoDestructor<std::map<PlanKey, std::unique_ptr<PlanEntry>>> plans WEFT_GUARDED_BY(plans_mu);
CudnnAttentionStats stats WEFT_GUARDED_BY(plans_mu);
NoDestructor<std::set<std::string>> logged WEFT_GUARDED_BY(plans_mu);  // messages printed

std::string Describe(const AttentionDims& d, bool backward) {
  std::ostringstream s;
  s << "Attention's " << (backward ? "backward" : "forward") << " (B " << d.b << ", H " << d.h
    << ", Tq " << d.tq << ", Tk " << d.tk << ", D " << d.d << ", Dv " << d.dv
    << (d.causal ? ", causal" : "") << ")";
  return s.str();
}

// Why cuDNN cannot take the call before a graph is built; empty when it may.
std::string Unsupported(const AttentionDims& d) {
  const size_t version = cudnnGetVersion();
  if (version < kMinCudnnVersion) {
    return "cuDNN " + std::to_string(version) + " is older than 9.0 (no fused attention)";
  }
  if (d.d % 8 != 0 || d.dv % 8 != 0) return "D and Dv must be multiples of 8";
  for (const AttentionRows& r : {d.q, d.k, d.v, d.out}) {
    if (r.offset % 8 != 0 || r.b % 8 != 0 || r.h % 8 != 0 || r.t % 8 != 0)
      return "every row must start 16 bytes aligned (strides and offsets multiples of 8)";
  }
  return "";
}

std::unique_ptr<PlanEntry> BuildEntry(cudnnHandle_t h, const AttentionDims& d, DType dtype,
                                      bool backward) {
  auto entry = std::make_unique<PlanEntry>();
  entry->declined = Unsupported(d);
  if (!entry->declined.empty()) return entry;
  try {
    BackendGraph g;
    (backward ? BackwardGraph : ForwardGraph)(g, d, CudnnType(dtype));
    entry->plan = std::make_unique<BackendPlan>(std::move(g).Build(h));
  } catch (const CudnnDeclined& e) {
    entry->declined = e.what;
  }
  return entry;
}

// Prints `message` the first time it comes.
void LogOnce(const std::string& message) WEFT_REQUIRES(plans_mu) {
  if (logged->insert(message).second) std::cerr << message << std::endl;
}

// The plan of this handle and call, built on first use; null where cuDNN declined it.
const BackendPlan* PlanFor(cudnnHandle_t h, const AttentionDims& d, DType dtype, bool backward) {
  const PlanKey key{h, static_cast<int>(dtype), d.scale, d.causal, backward, ExtentsOf(d)};
  {
    MutexLock lock(&plans_mu);
    const auto it = plans->find(key);
    if (it != plans->end()) return it->second->plan.get();
  }
  std::unique_ptr<PlanEntry> built = BuildEntry(h, d, dtype, backward);
  MutexLock lock(&plans_mu);
  const auto [it, added] = plans->emplace(key, std::move(built));
  const PlanEntry& entry = *it->second;
  if (!added) return entry.plan.get();
  if (entry.plan) {
    ++stats.plans_built;
    const size_t v = cudnnGetVersion();
    LogOnce("weft: Attention on the GPU runs cuDNN's fused attention (cuDNN " +
            std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
            std::to_string(v % 100) + ") for " + std::string(DTypeName(dtype)));
  } else {
    ++stats.declined;
    LogOnce("weft: warning: cuDNN declined " + Describe(d, backward) + ": " + entry.declined +
            "; weft's kernels run it");
  }
  return entry.plan.get();
}

// The masked scores' fill: -inf, or the lowest float before cuDNN 9.10 (cudnn-frontend's rule:
// older engines prefer a finite value).
float MaskFill() {
  return cudnnGetVersion() < 91000 ? std::numeric_limits<float>::lowest()
                                   : -std::numeric_limits<float>::infinity();
}

void* Mutable(const void* p) { return const_cast<void*>(p); }  // the variant pack's type

// Whether every pointer is 16-byte aligned, as the plans' tensors say (arrays are; a view into
// one may not be): where not, weft's kernels take the call.
bool Aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// Runs `plan` on the call's stream; a failure is a weft::Error naming the call.
void Execute(const GpuCall& call, const BackendPlan& plan, const AttentionDims& d, bool backward,
             const std::vector<int64_t>& uids, const std::vector<void*>& pointers,
             void* workspace) {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  try {
    status =
        call.Cudnn([&](cudnnHandle_t h) { return plan.Execute(h, uids, pointers, workspace); });
  } catch (const CudnnDeclined& e) {
    WEFT_THROW("cuDNN's " << Describe(d, backward) << " failed: " << e.what);
  }
  if (status != CUDNN_STATUS_SUCCESS) {
    WEFT_THROW("cuDNN's " << Describe(d, backward) << " failed: " << cudnnGetErrorString(status));
  }
}

}  // namespace

bool CudnnAttentionForward(const GpuCall& call, const AttentionDims& d, DType dtype,
                           const CudnnAttentionForwardArgs& a) {
  if (!Aligned({a.q, a.k, a.v, a.out})) return false;
  const BackendPlan* plan =
      call.Cudnn([&](cudnnHandle_t h) { return PlanFor(h, d, dtype, /*backward=*/false); });
  if (plan == nullptr) return false;
  const size_t stats_bytes = a.lse ? 0 : static_cast<size_t>(d.Heads() * d.tq) * sizeof(float);
  const std::vector<void*> ws =
      call.Workspace({static_cast<size_t>(plan->workspace()), stats_bytes});
  float scale = static_cast<float>(d.scale), fill = MaskFill();
  std::vector<int64_t> uids = {kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> pointers = {Mutable(a.q), Mutable(a.k),          Mutable(a.v),
                                 a.out,        a.lse ? a.lse : ws[1], &scale};
  if (d.causal) uids.push_back(kNegInf), pointers.push_back(&fill);
  Execute(call, *plan, d, false, uids, pointers, ws[0]);
  return true;
}

bool CudnnAttentionBackward(const GpuCall& call, const AttentionDims& d, DType dtype,
                            const CudnnAttentionBackwardArgs& a) {
  if (!Aligned({a.q, a.k, a.v, a.out, a.out_grad, a.dq, a.dk, a.dv})) return false;
  const BackendPlan* plan =
      call.Cudnn([&](cudnnHandle_t h) { return PlanFor(h, d, dtype, /*backward=*/true); });
  if (plan == nullptr) return false;
  const size_t rows = static_cast<size_t>(d.Heads() * d.tq);
  const std::vector<void*> ws = call.Workspace(
      {static_cast<size_t>(plan->workspace()), rows * sizeof(float), rows * d.d * sizeof(float)});
  // cuDNN before 9.6 needs the float accumulator of d_q zeroed (cudnn-frontend's rule).
  call.stream().Memset(ws[2], 0, rows * d.d * sizeof(float));
  float scale = static_cast<float>(d.scale), fill = MaskFill(), one = 1.0f;
  std::vector<int64_t> uids = {kQ,  kK,  kV,          kO,       kOutGrad, kStats, kDq,
                               kDk, kDv, kSoftmaxSum, kDqAccum, kScale,   kOne};
  std::vector<void*> pointers = {
      Mutable(a.q),   Mutable(a.k), Mutable(a.v), Mutable(a.out), Mutable(a.out_grad),
      Mutable(a.lse), a.dq,         a.dk,         a.dv,           ws[1],
      ws[2],          &scale,       &one};
  if (d.causal) uids.push_back(kNegInf), pointers.push_back(&fill);
  Execute(call, *plan, d, true, uids, pointers, ws[0]);
  return true;
}

CudnnAttentionStats GetCudnnAttentionStats() {
  MutexLock lock(&plans_mu);
  return stats;
}

}  // namespace weft::gpu
