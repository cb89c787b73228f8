// CPU compute of BatchNorm and _backward_BatchNorm (ops/nn/batch_norm.cc says what they compute).
// float32 and float64 run the loops below; bfloat16 data runs oneDNN's batch normalization on data
// seen as (outer, C, inner) (DataDesc), with float32 statistics. oneDNN 2.6 runs plain NCHW
// through its ncsp kernel, about three times slower than these loops on train_resnet's network
// (bench/README.md: `bazel run --config=opt //bench:resnet_bench`). Both end the same way
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

// ---- float32 and float64: loops over (outer, C, inner) ----
//
// Memory-bound passes over the data, threaded over channels (sums) or rows (elementwise), each
// row's inner loop vectorized; sums of a row in the data's type (inner values, at most a plane),
// rows summed in double. Statistics S: float for float32 data, double for float64.

// Calls f(first, count) for each contiguous row of channel `ch`: count values from offset first.
template <typename F>
inline void ForEachRowOfChannel(const BnDims& d, int64_t ch, F&& f) {
  for (int64_t o = 0; o < d.outer; ++o) f((o * d.c + ch) * d.inner, d.inner);
}

// The sum of f(i) over [first, first + count), vectorized.
template <typename T, typename F>
inline T RowSum(int64_t first, int64_t count, F&& f) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = first; i < first + count; ++i) sum += f(i);
  return sum;
}

// Per channel: the mean of x and its biased variance (two passes, as oneDNN's).
template <typename T, typename S>
void BatchMoments(const BnDims& d, const T* x, S* mean, S* var) {
  const double n = static_cast<double>(d.PerChannel());
  ParallelFor(d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      double sum = 0, squares = 0;
      ForEachRowOfChannel(d, ch, [&](int64_t first, int64_t count) {
        sum += RowSum<T>(first, count, [&](int64_t i) { return x[i]; });
      });
      const T m = static_cast<T>(sum / n);
      ForEachRowOfChannel(d, ch, [&](int64_t first, int64_t count) {
        squares += RowSum<T>(first, count, [&](int64_t i) { return (x[i] - m) * (x[i] - m); });
      });
      mean[ch] = static_cast<S>(sum / n);
      var[ch] = static_cast<S>(squares / n);
    }
  });
}

// y = act(x * scale + shift), scale = gamma * invstd, shift = beta - mean * scale; gamma null: 1.
template <typename T, typename S>
void Normalize(const BnCall& c, const T* x, const S* gamma, const S* beta, const S* mean,
               const S* invstd, T* y) {
  const BnDims& d = c.d;
  ParallelFor(d.outer * d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t ch = row % d.c, first = row * d.inner;
      const T scale = static_cast<T>((gamma ? gamma[ch] : S(1)) * invstd[ch]);
      const T shift = static_cast<T>(beta[ch] - mean[ch] * (gamma ? gamma[ch] : S(1)) * invstd[ch]);
      if (c.relu()) {
#pragma omp simd
        for (int64_t i = first; i < first + d.inner; ++i)
          y[i] = fn::ForwardOf<fn::Relu>(x[i] * scale + shift, T(0), T(0));
      } else {
#pragma omp simd
        for (int64_t i = first; i < first + d.inner; ++i) y[i] = x[i] * scale + shift;
      }
    }
  });
}

// in: (data, gamma, beta, moving_mean, moving_var); out: (output, saved_mean, saved_invstd).
template <typename T, typename S>
void BnForwardLoops(const OpContext& ctx, const BnCall& c, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  StagedOutputs staged(ctx, req, out, false);
  const T* x = in[0].data<T>();
  if (c.batch) BatchMoments(c.d, x, staged.Target(1).data<S>(), staged.Target(2).data<S>());
  FinishStatistics<S>(c, in, staged);
  Normalize(c, x, c.p.fix_gamma ? nullptr : in[1].data<S>(), in[2].data<S>(),
            staged.Target(1).data<S>(), staged.Target(2).data<S>(), staged.Target(0).data<T>());
  staged.Finish();
}

// What the backward reads of one call: dy masked by relu where y is given.
template <typename T, typename S>
struct GradInputs {
  const T *dy, *x, *y;
  const S *mean, *invstd;
  T Dy(int64_t at) const { return y ? fn::BackwardOf<fn::Relu>(dy[at], y[at], T(0)) : dy[at]; }
};

// Per channel: sum(dy) and sum(dy * x_hat), x_hat = (x - mean) * invstd.
template <typename T, typename S>
void GradSums(const BnDims& d, const GradInputs<T, S>& g, S* sum_dy, S* sum_dy_xhat) {
  ParallelFor(d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      const T mean = static_cast<T>(g.mean[ch]);
      double a = 0, b = 0;
      ForEachRowOfChannel(d, ch, [&](int64_t first, int64_t count) {
        a += RowSum<T>(first, count, [&](int64_t i) { return g.Dy(i); });
        b += RowSum<T>(first, count, [&](int64_t i) { return g.Dy(i) * (g.x[i] - mean); });
      });
      sum_dy[ch] = static_cast<S>(a);
      sum_dy_xhat[ch] = static_cast<S>(b * g.invstd[ch]);
    }
  });
}

// dx = gamma * invstd * (dy - sum_dy / n - x_hat * sum_dy_xhat / n) with batch statistics, else
// gamma * invstd * dy. gamma null: 1.
template <typename T, typename S>
void DataGrad(const BnCall& c, const GradInputs<T, S>& g, const S* gamma, const S* sum_dy,
              const S* sum_dy_xhat, T* dx) {
  const BnDims& d = c.d;
  const S n = static_cast<S>(d.PerChannel());
  ParallelFor(d.outer * d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t ch = row % d.c, first = row * d.inner;
      const S invstd = g.invstd[ch];
      const T scale = static_cast<T>((gamma ? gamma[ch] : S(1)) * invstd);
      const T mean_dy = static_cast<T>(c.batch ? sum_dy[ch] / n : 0);
      // x_hat * sum_dy_xhat / n = (x - mean) * k, k = invstd * sum_dy_xhat / n.
      const T k = static_cast<T>(c.batch ? invstd * sum_dy_xhat[ch] / n : 0);
      const T mean = static_cast<T>(g.mean[ch]);
#pragma omp simd
      for (int64_t i = first; i < first + d.inner; ++i)
        dx[i] = scale * (g.Dy(i) - mean_dy - (g.x[i] - mean) * k);
    }
  });
}

// in: as BnBackwardInput places them; out: (d_data, d_gamma, d_beta).
template <typename T, typename S>
void BnBackwardLoops(const OpContext& ctx, const BnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  StagedOutputs staged(ctx, req, out, false);
  const GradInputs<T, S> g{in[kBnOutGrad].data<T>(), in[kBnData].data<T>(),
                           c.relu() ? in[kBnOutput].data<T>() : nullptr, in[kBnSavedMean].data<S>(),
                           in[kBnSavedInvstd].data<S>()};
  S *sum_dy_xhat = staged.Target(1).data<S>(), *sum_dy = staged.Target(2).data<S>();
  GradSums(c.d, g, sum_dy, sum_dy_xhat);
  if (staged.Needed(0)) {
    DataGrad(c, g, c.p.fix_gamma ? nullptr : in[kBnGamma].data<S>(), sum_dy, sum_dy_xhat,
             staged.Target(0).data<T>());
  }
  if (c.p.fix_gamma) std::fill_n(sum_dy_xhat, c.d.c, S(0));
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
  if (in[0].dtype() == DType::kFloat64) return BnForwardLoops<double, double>(ctx, c, in, req, out);
  if (in[0].dtype() == DType::kFloat32) return BnForwardLoops<float, float>(ctx, c, in, req, out);
  BnForwardDnnl(ctx, c, in, req, out);
}

void BnBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                std::span<const OpReq> req, std::span<const TensorView> out) {
  const BnCall c = CallOf("_backward_BatchNorm", a, in[kBnData].shape(), ctx.is_train);
  if (in[kBnData].dtype() == DType::kFloat64)
    return BnBackwardLoops<double, double>(ctx, c, in, req, out);
  if (in[kBnData].dtype() == DType::kFloat32)
    return BnBackwardLoops<float, float>(ctx, c, in, req, out);
  BnBackwardDnnl(ctx, c, in, req, out);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"BatchNorm", {.compute = BnForward}},
                                                 {"_backward_BatchNorm", {.compute = BnBackward}},
                                             });

}  // namespace
}  // namespace weft::cpu
