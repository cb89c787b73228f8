// CPU compute of BatchNorm and _backward_BatchNorm (ops/nn/batch_norm.cc says what they compute).
// float32 and bfloat16 data run oneDNN's batch normalization on data seen as (outer, C, inner)
// (DataDesc), with float32 statistics; float64 runs the loops below. Both end the same way
// (FinishStatistics): a training forward moves the running statistics and keeps the batch's mean
// and 1 / sqrt(var + eps) for the backward, any other forward keeps those of the moving
// statistics.
//
// relu: oneDNN's forward fuses it (fuse_norm_relu, its workspace dropped); the backward masks
// out_grad by output > 0 with relu's own gradient (fn::Relu) and runs the plain backward, so no
// workspace has to live from the forward to the backward.
#include <algorithm>
#include <cmath>

#include "core/bfloat16.h"
#include "ops/attrs.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/math/unary.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// One call: the attributes, the data's view, and whether it normalizes with the batch's
// statistics (training without use_global_stats).
struct BnCall {
  BatchNormParam p;
  BnDims d;
  bool batch;
  bool relu() const { return p.act == BnAct::kRelu; }
};

BnCall CallOf(const char* op, const Attrs& a, const Shape& data, bool is_train) {
  const BatchNormParam& p = a.Get<BatchNormParam>();
  const BnCall c{p, BnDimsOf(op, p, data), is_train && !p.use_global_stats};
  if (c.batch) CheckBatchStatistics(op, c.d, data);
  return c;
}

// ---- Statistics (float for float32 and bfloat16 data, double for float64) ----

// After a training forward wrote the batch's mean and biased variance into `mean` and
// `var_then_invstd`: moves the running statistics towards them (the variance unbiased), then
// turns the variance into 1 / sqrt(var + eps).
template <typename S>
void UpdateRunning(const BnCall& c, const S* mean, S* var_then_invstd, S* running_mean,
                   S* running_var) {
  const S m = static_cast<S>(c.p.momentum), eps = static_cast<S>(c.p.eps);
  const S n = static_cast<S>(c.d.PerChannel()), unbiased = n / (n - 1);
  for (int64_t ch = 0; ch < c.d.c; ++ch) {
    const S var = var_then_invstd[ch];
    running_mean[ch] = m * running_mean[ch] + (1 - m) * mean[ch];
    running_var[ch] = m * running_var[ch] + (1 - m) * var * unbiased;
    var_then_invstd[ch] = 1 / std::sqrt(var + eps);
  }
}

// Outside batch statistics: the saved statistics are the moving ones.
template <typename S>
void SaveMoving(const BnCall& c, const S* moving_mean, const S* moving_var, S* mean, S* invstd) {
  const S eps = static_cast<S>(c.p.eps);
  for (int64_t ch = 0; ch < c.d.c; ++ch) {
    mean[ch] = moving_mean[ch];
    invstd[ch] = 1 / std::sqrt(moving_var[ch] + eps);
  }
}

// in: BatchNorm's inputs; Target(1), Target(2) of `staged`: the saved mean and, with batch
// statistics, the batch's variance. Leaves there the mean and invstd to normalize with.
template <typename S>
void FinishStatistics(const BnCall& c, std::span<const TensorView> in,
                      const StagedOutputs& staged) {
  S* mean = staged.Target(1).data<S>();
  S* invstd = staged.Target(2).data<S>();
  if (c.batch) {
    UpdateRunning(c, mean, invstd, in[3].data<S>(), in[4].data<S>());
  } else {
    SaveMoving(c, in[3].data<S>(), in[4].data<S>(), mean, invstd);
  }
}

// ---- float64: loops over (outer, C, inner) ----

// Calls f(at) for the offset of each value of channel `ch`.
template <typename F>
inline void ForEachOfChannel(const BnDims& d, int64_t ch, F&& f) {
  for (int64_t o = 0; o < d.outer; ++o) {
    const int64_t first = (o * d.c + ch) * d.inner;
    for (int64_t i = 0; i < d.inner; ++i) f(first + i);
  }
}

// Per channel: the mean of x and its biased variance (two passes).
template <typename T>
void BatchMoments(const BnDims& d, const T* x, T* mean, T* var) {
  const T n = static_cast<T>(d.PerChannel());
  ParallelFor(d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      T sum = 0, squares = 0;
      ForEachOfChannel(d, ch, [&](int64_t at) { sum += x[at]; });
      mean[ch] = sum / n;
      ForEachOfChannel(d, ch,
                       [&](int64_t at) { squares += (x[at] - mean[ch]) * (x[at] - mean[ch]); });
      var[ch] = squares / n;
    }
  });
}

// y = act(gamma * (x - mean) * invstd + beta); gamma null: 1 (fix_gamma).
template <typename T>
void Normalize(const BnCall& c, const T* x, const T* gamma, const T* beta, const T* mean,
               const T* invstd, T* y) {
  const BnDims& d = c.d;
  ParallelFor(d.outer * d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t ch = row % d.c, first = row * d.inner;
      const T scale = (gamma ? gamma[ch] : T(1)) * invstd[ch];
      for (int64_t i = first; i < first + d.inner; ++i) {
        const T v = (x[i] - mean[ch]) * scale + beta[ch];
        y[i] = c.relu() ? fn::Relu::Fwd(v, T(0)) : v;
      }
    }
  });
}

// in: (data, gamma, beta, moving_mean, moving_var); out: (output, saved_mean, saved_invstd).
void BnForwardLoops(const OpContext& ctx, const BnCall& c, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  StagedOutputs staged(ctx, req, out, false);
  const double* x = in[0].data<double>();
  if (c.batch)
    BatchMoments(c.d, x, staged.Target(1).data<double>(), staged.Target(2).data<double>());
  FinishStatistics<double>(c, in, staged);
  Normalize(c, x, c.p.fix_gamma ? nullptr : in[1].data<double>(), in[2].data<double>(),
            staged.Target(1).data<double>(), staged.Target(2).data<double>(),
            staged.Target(0).data<double>());
  staged.Finish();
}

// What the backward reads of one call: dy masked by relu where y is given.
template <typename T>
struct GradInputs {
  const T *dy, *x, *y, *mean, *invstd;
  T Dy(int64_t at) const { return y ? fn::BackwardOf<fn::Relu>(dy[at], y[at], T(0)) : dy[at]; }
  T XHat(int64_t at, int64_t ch) const { return (x[at] - mean[ch]) * invstd[ch]; }
};

// Per channel: sum(dy) and sum(dy * x_hat).
template <typename T>
void GradSums(const BnDims& d, const GradInputs<T>& g, T* sum_dy, T* sum_dy_xhat) {
  ParallelFor(d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      T a = 0, b = 0;
      ForEachOfChannel(d, ch, [&](int64_t at) {
        a += g.Dy(at);
        b += g.Dy(at) * g.XHat(at, ch);
      });
      sum_dy[ch] = a, sum_dy_xhat[ch] = b;
    }
  });
}

// dx = gamma * invstd * (dy - sum_dy / n - x_hat * sum_dy_xhat / n) with batch statistics, else
// gamma * invstd * dy. gamma null: 1.
template <typename T>
void DataGrad(const BnCall& c, const GradInputs<T>& g, const T* gamma, const T* sum_dy,
              const T* sum_dy_xhat, T* dx) {
  const BnDims& d = c.d;
  const T n = static_cast<T>(d.PerChannel());
  ParallelFor(d.outer * d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t ch = row % d.c, first = row * d.inner;
      const T scale = (gamma ? gamma[ch] : T(1)) * g.invstd[ch];
      const T mean_dy = c.batch ? sum_dy[ch] / n : 0,
              mean_dy_xhat = c.batch ? sum_dy_xhat[ch] / n : 0;
      for (int64_t i = first; i < first + d.inner; ++i)
        dx[i] = scale * (g.Dy(i) - mean_dy - g.XHat(i, ch) * mean_dy_xhat);
    }
  });
}

// in: as BnBackwardInput places them; out: (d_data, d_gamma, d_beta).
void BnBackwardLoops(const OpContext& ctx, const BnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  StagedOutputs staged(ctx, req, out, false);
  const GradInputs<double> g{in[kBnOutGrad].data<double>(), in[kBnData].data<double>(),
                             c.relu() ? in[kBnOutput].data<double>() : nullptr,
                             in[kBnSavedMean].data<double>(), in[kBnSavedInvstd].data<double>()};
  double *sum_dy_xhat = staged.Target(1).data<double>(), *sum_dy = staged.Target(2).data<double>();
  GradSums(c.d, g, sum_dy, sum_dy_xhat);
  if (staged.Needed(0)) {
    DataGrad(c, g, c.p.fix_gamma ? nullptr : in[kBnGamma].data<double>(), sum_dy, sum_dy_xhat,
             staged.Target(0).data<double>());
  }
  if (c.p.fix_gamma) std::fill_n(sum_dy_xhat, c.d.c, 0.0);
  staged.Finish();
}

// ---- float32 and bfloat16: oneDNN ----

using Flags = dnnl::normalization_flags;

// (outer, C, inner) as 4-D nchw (outer, C, inner, 1): oneDNN's jit kernels take 4-D and 5-D plain
// layouts, 3-D ncw only its reference kernel.
dnnl::memory::desc DataDesc(const BnDims& d, DType dtype) {
  const auto type =
      dtype == DType::kBFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  return dnnl::memory::desc({d.outer, d.c, d.inner, 1}, type, dnnl::memory::format_tag::nchw);
}

dnnl::memory DataMemory(const TensorView& t, const BnDims& d) {
  return dnnl::memory(DataDesc(d, t.dtype()), DnnlEngine(), t.raw());
}

// shift always; scale unless fix_gamma; the given statistics outside batch statistics.
Flags FlagsOf(const BnCall& c) {
  Flags f = Flags::use_shift;
  if (!c.p.fix_gamma) f |= Flags::use_scale;
  if (!c.batch) f |= Flags::use_global_stats;
  return f;
}

std::string KeyOf(const char* direction, const BnCall& c, DType dtype, Flags flags) {
  return PrimitiveKey("BatchNorm", direction, dtype, c.d.outer, c.d.c, c.d.inner,
                      static_cast<unsigned>(flags), FloatAttr(c.p.eps));
}

dnnl::batch_normalization_forward::primitive_desc ForwardDesc(const BnCall& c, DType dtype,
                                                              dnnl::prop_kind kind, Flags flags) {
  const dnnl::batch_normalization_forward::desc desc(kind, DataDesc(c.d, dtype),
                                                     static_cast<float>(c.p.eps), flags);
  return {desc, ScratchpadAttr(), DnnlEngine()};
}

// Training forward with batch statistics, else inference; relu fused.
DnnlPrimitive ForwardPrimitive(const BnCall& c, DType dtype) {
  const Flags flags = FlagsOf(c) | (c.relu() ? Flags::fuse_norm_relu : Flags::none);
  return CachedPrimitive(KeyOf("forward", c, dtype, flags), [&] {
    const auto kind =
        c.batch ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    return MakePrimitive<dnnl::batch_normalization_forward>(ForwardDesc(c, dtype, kind, flags));
  });
}

// d_data, and d_gamma (unless fix_gamma) and d_beta; relu is masked before.
DnnlPrimitive BackwardPrimitive(const BnCall& c, DType dtype) {
  const Flags flags = FlagsOf(c);
  return CachedPrimitive(KeyOf("backward", c, dtype, flags), [&] {
    const dnnl::memory::desc data = DataDesc(c.d, dtype);
    const dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, data, data,
                                                        static_cast<float>(c.p.eps), flags);
    return MakePrimitive<dnnl::batch_normalization_backward>(
        {desc, ScratchpadAttr(), DnnlEngine(),
         ForwardDesc(c, dtype, dnnl::prop_kind::forward_training, flags)});
  });
}

// The scale and shift arguments, and the statistics: the batch's (outputs) or the moving ones.
DnnlArgs ForwardArgs(const BnCall& c, std::span<const TensorView> in, const StagedOutputs& staged) {
  DnnlArgs args = {{DNNL_ARG_SRC, DataMemory(in[0], c.d)},
                   {DNNL_ARG_DST, DataMemory(staged.Target(0), c.d)},
                   {DNNL_ARG_SHIFT, DnnlMemory(in[2])},
                   {DNNL_ARG_MEAN, DnnlMemory(c.batch ? staged.Target(1) : in[3])},
                   {DNNL_ARG_VARIANCE, DnnlMemory(c.batch ? staged.Target(2) : in[4])}};
  if (!c.p.fix_gamma) args.emplace(DNNL_ARG_SCALE, DnnlMemory(in[1]));
  return args;
}

void BnForwardDnnl(const OpContext& ctx, const BnCall& c, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  const DnnlPrimitive prim = ForwardPrimitive(c, in[0].dtype());
  const size_t workspace = WorkspaceBytes(prim);  // relu's mask in training: not kept
  StagedOutputs staged(ctx, req, out, false, {ScratchpadBytes(prim), workspace});
  DnnlArgs args = ForwardArgs(c, in, staged);
  if (workspace > 0) {
    args.emplace(DNNL_ARG_WORKSPACE,
                 dnnl::memory(prim.desc.workspace_desc(), DnnlEngine(), staged.Extra(1)));
  }
  ExecutePrimitive(prim, std::move(args), staged.Extra(0));
  FinishStatistics<float>(c, in, staged);
  staged.Finish();
}

// dy masked by relu (dy where y > 0, else 0) into `masked`, in dy's dtype.
TensorView MaskedByRelu(const TensorView& dy, const TensorView& y, void* masked) {
  const TensorView m(masked, dy.shape(), dy.dtype(), dy.device());
  ParallelFor(dy.size(), 4096, [&](int64_t b, int64_t e) {
    if (dy.dtype() == DType::kFloat32) {
      const float *g = dy.data<float>(), *v = y.data<float>();
      StoreRange(m.data<float>(), OpReq::kWrite, b, e,
                 [&](int64_t i) { return fn::BackwardOf<fn::Relu>(g[i], v[i], 0.0f); });
      return;
    }
    const auto *g = static_cast<const BFloat16*>(dy.raw()),
               *v = static_cast<const BFloat16*>(y.raw());
    auto* r = static_cast<BFloat16*>(masked);
    for (int64_t i = b; i < e; ++i)
      r[i] = BFloat16::FromFloat(fn::BackwardOf<fn::Relu>(g[i].ToFloat(), v[i].ToFloat(), 0.0f));
  });
  return m;
}

// The variance 1 / invstd^2 - eps that oneDNN's backward reads (it takes the variance, the forward
// kept invstd), into `var` (C floats).
dnnl::memory VarianceOf(const BnCall& c, const TensorView& invstd, void* var) {
  const float* s = invstd.data<float>();
  float* v = static_cast<float*>(var);
  for (int64_t ch = 0; ch < c.d.c; ++ch) v[ch] = 1 / (s[ch] * s[ch]) - static_cast<float>(c.p.eps);
  return dnnl::memory(PlainDesc(Shape{c.d.c}), DnnlEngine(), var);
}

// in: as BnBackwardInput places them; out: (d_data, d_gamma, d_beta).
void BnBackwardDnnl(const OpContext& ctx, const BnCall& c, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const TensorView &data = in[kBnData], &out_grad = in[kBnOutGrad];
  const DnnlPrimitive prim = BackwardPrimitive(c, data.dtype());
  StagedOutputs staged(
      ctx, req, out, false,
      {ScratchpadBytes(prim), c.relu() ? out_grad.bytes() : 0, c.d.c * sizeof(float)});
  const TensorView dy =
      c.relu() ? MaskedByRelu(out_grad, in[kBnOutput], staged.Extra(1)) : out_grad;
  // oneDNN 2.6 checks that a backward with use_shift is given the shift, though it reads it only
  // with fuse_norm_relu.
  DnnlArgs args = {{DNNL_ARG_SRC, DataMemory(data, c.d)},
                   {DNNL_ARG_DIFF_DST, DataMemory(dy, c.d)},
                   {DNNL_ARG_SHIFT, DnnlMemory(in[kBnBeta])},
                   {DNNL_ARG_MEAN, DnnlMemory(in[kBnSavedMean])},
                   {DNNL_ARG_VARIANCE, VarianceOf(c, in[kBnSavedInvstd], staged.Extra(2))},
                   {DNNL_ARG_DIFF_SRC, DataMemory(staged.Target(0), c.d)},
                   {DNNL_ARG_DIFF_SHIFT, DnnlMemory(staged.Target(2))}};
  if (!c.p.fix_gamma) {
    args.emplace(DNNL_ARG_SCALE, DnnlMemory(in[kBnGamma]));
    args.emplace(DNNL_ARG_DIFF_SCALE, DnnlMemory(staged.Target(1)));
  } else {
    std::fill_n(staged.Target(1).data<float>(), c.d.c, 0.0f);
  }
  ExecutePrimitive(prim, std::move(args), staged.Extra(0));
  staged.Finish();
}

// ---- compute ----

void BnForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
               std::span<const OpReq> req, std::span<const TensorView> out) {
  const BnCall c = CallOf("BatchNorm", a, in[0].shape(), ctx.is_train);
  if (in[0].dtype() == DType::kFloat64) return BnForwardLoops(ctx, c, in, req, out);
  BnForwardDnnl(ctx, c, in, req, out);
}

void BnBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                std::span<const OpReq> req, std::span<const TensorView> out) {
  const BnCall c = CallOf("_backward_BatchNorm", a, in[kBnData].shape(), ctx.is_train);
  if (in[kBnData].dtype() == DType::kFloat64) return BnBackwardLoops(ctx, c, in, req, out);
  BnBackwardDnnl(ctx, c, in, req, out);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"BatchNorm", {.compute = BnForward}},
                                                 {"_backward_BatchNorm", {.compute = BnBackward}},
                                             });

}  // namespace
}  // namespace weft::cpu
