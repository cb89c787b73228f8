// CPU compute of LayerNorm and _backward_LayerNorm (ops/nn/layer_norm.cc says what they compute).
// float32 and bfloat16 data run oneDNN's layer normalization (float32 statistics, scale and
// shift) on data seen as (rows, C), or, when the axis is not the last, as (outer, inner, C) with C
// strided by inner: oneDNN normalizes its last logical dimension, with its jit kernels
// (simple_layer_normalization) where C is contiguous and its reference kernel (lnorm_ref) where it
// is strided (primitive_desc::impl_info_str in 2.6.3). float64 runs the loops below; float32
// stays on oneDNN, which these loops, instantiated for float, did not beat on 8192 rows of 64 to
// 768 values, forward or backward, on one thread. oneDNN keeps the variance: the forward turns it
// into rstd = 1 / sqrt(var + eps), the backward turns rstd back into the variance it reads.
// out_dtype bfloat16 over float32 data: oneDNN in float32, the output rounded once from a float
// buffer and the out_grad widened into one (NarrowedBytes).
#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <vector>

#include "ops/attrs.h"
#include "ops/cpu/internal/cast.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

struct LnCall {
  LayerNormParam p;
  LnDims d;
};

LnCall CallOf(const char* op, const Attrs& a, const Shape& data) {
  const LayerNormParam& p = a.Get<LayerNormParam>();
  return {p, LnDimsOf(op, p, data)};
}

// Rows per parallel chunk: about 16k values.
int64_t RowGrain(const LnDims& d) { return std::max<int64_t>(1, 16384 / d.c); }

// ---- float64: loops over rows ----
//
// Row r = (o, i) holds C values from (o * C) * inner + i, `inner` apart. Each row's loops are
// vectorized (with a compile-time stride 1 when the axis is the last), threaded over rows; the
// parameter gradients are threaded over C.

using Contiguous = std::integral_constant<int64_t, 1>;

inline int64_t RowStart(const LnDims& d, int64_t r) {
  return (r / d.inner) * d.c * d.inner + r % d.inner;
}

// The sum of f(j) over j < n, vectorized.
template <typename T, typename F>
inline T Sum(int64_t n, F&& f) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += f(j);
  return sum;
}

// One row: its mean and rstd, and y = (x - mean) * rstd * gamma + beta. x, y: the row's start.
template <typename T, typename Stride>
void ForwardRow(const LnCall& c, Stride s, const T* x, const T* gamma, const T* beta, T* y, T& mean,
                T& rstd) {
  const int64_t n = c.d.c;
  const T m = Sum<T>(n, [&](int64_t j) { return x[j * s]; }) / static_cast<T>(n);
  const T var =
      Sum<T>(n, [&](int64_t j) { return (x[j * s] - m) * (x[j * s] - m); }) / static_cast<T>(n);
  const T r = 1 / std::sqrt(var + static_cast<T>(c.p.eps));
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) y[j * s] = (x[j * s] - m) * r * gamma[j] + beta[j];
  mean = m, rstd = r;
}

// in: (data, gamma, beta); out: (output, mean, rstd).
template <typename T>
void LnForwardLoops(const OpContext& ctx, const LnCall& c, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  StagedOutputs staged(ctx, req, out, false);
  const T *x = in[0].data<T>(), *gamma = in[1].data<T>(), *beta = in[2].data<T>();
  T *y = staged.Target(0).data<T>(), *mean = staged.Target(1).data<T>(),
    *rstd = staged.Target(2).data<T>();
  ParallelFor(c.d.Rows(), RowGrain(c.d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t at = RowStart(c.d, r);
      if (c.d.inner == 1) {
        ForwardRow(c, Contiguous(), x + at, gamma, beta, y + at, mean[r], rstd[r]);
      } else {
        ForwardRow(c, c.d.inner, x + at, gamma, beta, y + at, mean[r], rstd[r]);
      }
    }
  });
  staged.Finish();
}

// What the backward reads, as placed by LnBackwardInput.
template <typename T>
struct GradInputs {
  const T *dy, *x, *gamma, *mean, *rstd;
};

// One row's d_data: rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = dy * gamma. The
// pointers: the row's start.
template <typename T, typename Stride>
void DataGradRow(const LnCall& c, Stride s, const T* dy, const T* x, const T* gamma, T mean, T rstd,
                 T* dx) {
  const int64_t n = c.d.c;
  const T a = Sum<T>(n, [&](int64_t j) { return dy[j * s] * gamma[j]; }) / static_cast<T>(n);
  const T b = Sum<T>(n, [&](int64_t j) { return dy[j * s] * gamma[j] * (x[j * s] - mean); }) *
              rstd / static_cast<T>(n);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    dx[j * s] = rstd * (dy[j * s] * gamma[j] - a - (x[j * s] - mean) * rstd * b);
}

template <typename T>
void DataGrad(const LnCall& c, const GradInputs<T>& g, T* dx) {
  ParallelFor(c.d.Rows(), RowGrain(c.d), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t at = RowStart(c.d, r);
      if (c.d.inner == 1) {
        DataGradRow(c, Contiguous(), g.dy + at, g.x + at, g.gamma, g.mean[r], g.rstd[r], dx + at);
      } else {
        DataGradRow(c, c.d.inner, g.dy + at, g.x + at, g.gamma, g.mean[r], g.rstd[r], dx + at);
      }
    }
  });
}

// d_gamma[j] = sum over rows of dy * x_hat, d_beta[j] = sum over rows of dy; threaded over j.
template <typename T>
void ParamGrads(const LnDims& d, const GradInputs<T>& g, T* d_gamma, T* d_beta) {
  ParallelFor(d.c, std::max<int64_t>(1, 16384 / d.Rows()), [&](int64_t begin, int64_t end) {
    std::fill(d_gamma + begin, d_gamma + end, T(0));
    std::fill(d_beta + begin, d_beta + end, T(0));
    for (int64_t o = 0; o < d.outer; ++o) {
      for (int64_t j = begin; j < end; ++j) {
        const int64_t at = (o * d.c + j) * d.inner, r = o * d.inner;
        d_gamma[j] += Sum<T>(d.inner, [&](int64_t i) {
          return g.dy[at + i] * (g.x[at + i] - g.mean[r + i]) * g.rstd[r + i];
        });
        d_beta[j] += Sum<T>(d.inner, [&](int64_t i) { return g.dy[at + i]; });
      }
    }
  });
}

// in: as LnBackwardInput places them; out: (d_data, d_gamma, d_beta).
template <typename T>
void LnBackwardLoops(const OpContext& ctx, const LnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  StagedOutputs staged(ctx, req, out, false);
  const GradInputs<T> g{in[kLnOutGrad].data<T>(), in[kLnData].data<T>(), in[kLnGamma].data<T>(),
                        in[kLnMean].data<T>(), in[kLnRstd].data<T>()};
  if (staged.Needed(0)) DataGrad(c, g, staged.Target(0).data<T>());
  if (staged.Needed(1) || staged.Needed(2))
    ParamGrads(c.d, g, staged.Target(1).data<T>(), staged.Target(2).data<T>());
  staged.Finish();
}

// ---- float32 and bfloat16: oneDNN ----

using Flags = dnnl::normalization_flags;
const Flags kAffine = Flags::use_scale | Flags::use_shift;

// (rows, C) when the axis is the last, else (outer, inner, C) with C `inner` apart.
dnnl::memory::desc DataDesc(const LnDims& d, DType dtype) {
  using md = dnnl::memory;
  const auto type = dtype == DType::kBFloat16 ? md::data_type::bf16 : md::data_type::f32;
  if (d.inner == 1) return md::desc({d.outer, d.c}, type, md::format_tag::ab);
  return md::desc({d.outer, d.inner, d.c}, type, md::dims{d.c * d.inner, 1, d.inner});
}

// One float32 a row, row-major: (rows,), or (outer, inner).
dnnl::memory::desc StatDesc(const LnDims& d) {
  using md = dnnl::memory;
  if (d.inner == 1) return md::desc({d.outer}, md::data_type::f32, md::format_tag::a);
  return md::desc({d.outer, d.inner}, md::data_type::f32, md::format_tag::ab);
}

dnnl::memory DataMemory(const TensorView& t, const LnDims& d) {
  return dnnl::memory(DataDesc(d, t.dtype()), DnnlEngine(), t.raw());
}

dnnl::memory StatMemory(const LnDims& d, void* at) {
  return dnnl::memory(StatDesc(d), DnnlEngine(), at);
}

std::string KeyOf(const char* direction, const LnCall& c, DType dtype) {
  return PrimitiveKey("LayerNorm", direction, dtype, c.d.outer, c.d.c, c.d.inner,
                      FloatAttr(c.p.eps));
}

dnnl::layer_normalization_forward::primitive_desc ForwardDesc(const LnCall& c, DType dtype) {
  const dnnl::layer_normalization_forward::desc desc(dnnl::prop_kind::forward_training,
                                                     DataDesc(c.d, dtype), StatDesc(c.d),
                                                     static_cast<float>(c.p.eps), kAffine);
  return {desc, ScratchpadAttr(), DnnlEngine()};
}

// Always forward_training: it writes the mean and variance, which inference would not.
DnnlPrimitive ForwardPrimitive(const LnCall& c, DType dtype) {
  return CachedPrimitive(
      KeyOf("forward", c, dtype),
      [&] { return MakePrimitive<dnnl::layer_normalization_forward>(ForwardDesc(c, dtype)); },
      DnnlThreadsFor(c.d.Rows() * c.d.c * kNormWork));
}

// d_data, d_gamma and d_beta (prop_kind backward: oneDNN 2.6 has no backward_data with scale and
// shift, so an unread d_gamma and d_beta go to scratch).
DnnlPrimitive BackwardPrimitive(const LnCall& c, DType dtype) {
  return CachedPrimitive(
      KeyOf("backward", c, dtype),
      [&] {
        const dnnl::memory::desc data = DataDesc(c.d, dtype);
        const dnnl::layer_normalization_backward::desc desc(dnnl::prop_kind::backward, data, data,
                                                            StatDesc(c.d),
                                                            static_cast<float>(c.p.eps), kAffine);
        return MakePrimitive<dnnl::layer_normalization_backward>(
            {desc, ScratchpadAttr(), DnnlEngine(), ForwardDesc(c, dtype)});
      },
      DnnlThreadsFor(c.d.Rows() * c.d.c * kNormWork));
}

// rstd = 1 / sqrt(var + eps) in place, a float a row.
void VarianceToRstd(const LnCall& c, float* var_then_rstd) {
  const float eps = static_cast<float>(c.p.eps);
  for (int64_t r = 0; r < c.d.Rows(); ++r) var_then_rstd[r] = 1 / std::sqrt(var_then_rstd[r] + eps);
}

// The forward primitive's arguments: data, gamma, beta (in), the output `dst`, and a float a row
// for the mean and for the variance.
DnnlArgs ForwardArgs(const LnCall& c, std::span<const TensorView> in, const TensorView& dst,
                     float* mean, float* var) {
  return {{DNNL_ARG_SRC, DataMemory(in[0], c.d)}, {DNNL_ARG_DST, DataMemory(dst, c.d)},
          {DNNL_ARG_SCALE, DnnlMemory(in[1])},    {DNNL_ARG_SHIFT, DnnlMemory(in[2])},
          {DNNL_ARG_MEAN, StatMemory(c.d, mean)}, {DNNL_ARG_VARIANCE, StatMemory(c.d, var)}};
}

// A float32 tensor at `at`, shaped as t.
TensorView FloatView(void* at, const TensorView& t) {
  return TensorView(at, t.shape(), DType::kFloat32, t.device());
}

// The bytes of the float32 copy a call with out_dtype needs (0 without): float32 data whose
// output (and out_grad) is bfloat16 runs oneDNN in float32 (2.6 has no mixed source and
// destination types), the output rounded once from a float buffer, the out_grad widened into one.
size_t NarrowedBytes(const TensorView& data, const TensorView& y_or_dy) {
  if (y_or_dy.dtype() == data.dtype()) return 0;
  if (y_or_dy.dtype() != DType::kBFloat16) {  // the CPU has no float16
    WEFT_THROW("LayerNorm on the CPU: expected out_dtype bfloat16 for float32 data, found "
               << y_or_dy.dtype());
  }
  return static_cast<size_t>(data.size()) * sizeof(float);
}

// in: (data, gamma, beta); out: (output, mean, rstd). A bfloat16 output of float32 data is
// normalized into a float buffer (or, added to, into the float32 target StagedOutputs stages) and
// rounded once.
void LnForwardDnnl(const OpContext& ctx, const LnCall& c, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  const DnnlPrimitive prim = ForwardPrimitive(c, in[0].dtype());
  const bool narrowed = out[0].dtype() != in[0].dtype();
  StagedOutputs staged(ctx, req, out, false, {ScratchpadBytes(prim), NarrowedBytes(in[0], out[0])},
                       narrowed ? Bf16AddTo::kInFloat : Bf16AddTo::kRounded);
  const TensorView& target = staged.Target(0);  // float32 where a narrowed output is added to
  const bool via_buffer = target.dtype() != in[0].dtype();
  const TensorView y = via_buffer ? FloatView(staged.Extra(1), target) : target;
  float* var_then_rstd = staged.Target(2).data<float>();
  ExecutePrimitive(prim, ForwardArgs(c, in, y, staged.Target(1).data<float>(), var_then_rstd),
                   staged.Extra(0));
  VarianceToRstd(c, var_then_rstd);
  if (via_buffer && staged.Needed(0)) CastTensor(y, OpReq::kWrite, target);
  staged.Finish();
}

// The variance 1 / rstd^2 - eps that oneDNN's backward reads, into `var` (a float a row).
dnnl::memory VarianceOf(const LnCall& c, const TensorView& rstd, void* var) {
  const float* s = rstd.data<float>();
  float* v = static_cast<float*>(var);
  const float eps = static_cast<float>(c.p.eps);
  for (int64_t r = 0; r < c.d.Rows(); ++r) v[r] = 1 / (s[r] * s[r]) - eps;
  return StatMemory(c.d, var);
}

// in: as LnBackwardInput places them; out: (d_data, d_gamma, d_beta).
void LnBackwardDnnl(const OpContext& ctx, const LnCall& c, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull && req[1] == OpReq::kNull && req[2] == OpReq::kNull) return;
  const DnnlPrimitive prim = BackwardPrimitive(c, in[kLnData].dtype());
  const TensorView& dy = in[kLnOutGrad];
  StagedOutputs staged(ctx, req, out, false,
                       {ScratchpadBytes(prim), static_cast<size_t>(c.d.Rows()) * sizeof(float),
                        NarrowedBytes(in[kLnData], dy)});
  const bool widen = dy.dtype() != in[kLnData].dtype();  // a bfloat16 out_grad of float32 data
  const TensorView diff_dst = widen ? FloatView(staged.Extra(2), dy) : dy;
  if (widen) CastTensor(dy, OpReq::kWrite, diff_dst);
  // oneDNN 2.6 checks that a backward with use_shift is given the shift, which it does not read:
  // gamma stands in for beta (same descriptor).
  ExecutePrimitive(prim,
                   {{DNNL_ARG_SRC, DataMemory(in[kLnData], c.d)},
                    {DNNL_ARG_DIFF_DST, DataMemory(diff_dst, c.d)},
                    {DNNL_ARG_SCALE, DnnlMemory(in[kLnGamma])},
                    {DNNL_ARG_SHIFT, DnnlMemory(in[kLnGamma])},
                    {DNNL_ARG_MEAN, StatMemory(c.d, in[kLnMean].raw())},
                    {DNNL_ARG_VARIANCE, VarianceOf(c, in[kLnRstd], staged.Extra(1))},
                    {DNNL_ARG_DIFF_SRC, DataMemory(staged.Target(0), c.d)},
                    {DNNL_ARG_DIFF_SCALE, DnnlMemory(staged.Target(1))},
                    {DNNL_ARG_DIFF_SHIFT, DnnlMemory(staged.Target(2))}},
                   staged.Extra(0));
  staged.Finish();
}

// ---- compute ----

void LnForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
               std::span<const OpReq> req, std::span<const TensorView> out) {
  const LnCall c = CallOf("LayerNorm", a, in[0].shape());
  if (in[0].dtype() == DType::kFloat64) return LnForwardLoops<double>(ctx, c, in, req, out);
  LnForwardDnnl(ctx, c, in, req, out);
}

void LnBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                std::span<const OpReq> req, std::span<const TensorView> out) {
  const LnCall c = CallOf("_backward_LayerNorm", a, in[kLnData].shape());
  if (in[kLnData].dtype() == DType::kFloat64) return LnBackwardLoops<double>(ctx, c, in, req, out);
  LnBackwardDnnl(ctx, c, in, req, out);
}

// A forward bound at bind time (PrepareLnForward): the primitive on these tensors, mean and
// variance into the outputs where requested, else into buffers of its own (own_var empty: the
// variance is the rstd output's, turned into rstd after each run).
struct BoundLnForward {
  LnCall c;
  std::vector<float> own_mean, own_var;
  float* var_then_rstd;
  std::unique_ptr<BoundPrimitive> prim;
};

// Bind-time preparation: a float32 or bfloat16 call that overwrites its output (not in place)
// and its statistics or leaves them unread runs its primitive bound to these tensors (a
// generation step's one-row norms are mostly per-call overhead); any other call LnForward.
ComputeFn PrepareLnForward(const Attrs& a, Device, std::span<const TensorView> in,
                           std::span<const OpReq> req, std::span<const TensorView> out) {
  const auto overwrites = [&](int i) {
    return req[i] == OpReq::kWrite || req[i] == OpReq::kWriteInplace;
  };
  const bool stats_ok =
      (overwrites(1) || req[1] == OpReq::kNull) && (overwrites(2) || req[2] == OpReq::kNull);
  if (in[0].dtype() == DType::kFloat64 || out[0].dtype() != in[0].dtype() || !overwrites(0) ||
      !stats_ok || out[0].raw() == in[0].raw()) {
    return LnForward;
  }
  auto b = std::make_shared<BoundLnForward>();
  b->c = CallOf("LayerNorm", a, in[0].shape());
  const int64_t rows = b->c.d.Rows();
  float* mean =
      overwrites(1) ? out[1].data<float>() : (b->own_mean.resize(rows), b->own_mean.data());
  b->var_then_rstd =
      overwrites(2) ? out[2].data<float>() : (b->own_var.resize(rows), b->own_var.data());
  b->prim = std::make_unique<BoundPrimitive>(ForwardPrimitive(b->c, in[0].dtype()),
                                             ForwardArgs(b->c, in, out[0], mean, b->var_then_rstd));
  return [b](const OpContext& ctx, const Attrs&, std::span<const TensorView>,
             std::span<const OpReq>, std::span<const TensorView>) {
    b->prim->Run(ctx);
    if (b->own_var.empty()) VarianceToRstd(b->c, b->var_then_rstd);
  };
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"LayerNorm", {.compute = LnForward, .prepare = PrepareLnForward}},
                               {"_backward_LayerNorm", {.compute = LnBackward}},
                           });

}  // namespace
}  // namespace weft::cpu
