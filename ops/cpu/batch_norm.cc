// CPU compute of BatchNorm and _backward_BatchNorm (ops/nn/batch_norm.cc says what they compute),
// on weft's own loops for every dtype: float32, float64, and bfloat16 data, computed in float with
// float32 statistics, each output rounded once. (oneDNN 2.6 runs plain NCHW through its ncsp
// kernel: about three times slower than these loops on train_resnet's float32 network, and half of
// a bfloat16-mixed ResNet-18 step; bench/README.md, `bazel run --config=opt //bench:resnet_bench`.)
// A training forward moves the running statistics and keeps the batch's mean and
// 1 / sqrt(var + eps) for the backward, any other forward keeps those of the moving statistics
// (FinishStatistics).
//
// Layout NCHW16c: a blocked image (window2d.h) runs the same loops over its runs of 16 channels'
// values, a vector of channels at each position (BlockedMoments, ...), within rounding of NCHW's.
//
// relu: the forward applies it after the affine step; the backward masks out_grad by output > 0
// with relu's own gradient (fn::Relu), so no workspace has to live from the forward to the
// backward.
#include <algorithm>
#include <cmath>
#include <span>
#include <type_traits>

#include "core/bfloat16.h"
#include "ops/attrs.h"
#include "ops/cpu/internal/cpu_util.h"
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

// ---- Loops over (outer, C, inner) ----
//
// Memory-bound passes over the data, threaded over channels (sums) or rows (elementwise), each
// row's inner loop vectorized. T is the stored type; the loops compute in A = ArithOf<T> (float for
// float32 and bfloat16, double for float64), which is also the statistics' type, and round each
// output to T once. bfloat16 values load exactly into float and go through the same operations
// in the same order, so bfloat16 data gets float32's results on the same values, rounded once,
// bit for bit (mixed_precision_test checks it).

// The partial sums RowSum keeps: lane l sums the values at first + l, first + l + kSumLanes, ...,
// and the lanes are added in order at the end. A fixed order, not the vector width the compiler
// picks for each element type (or a reduction's), so that bfloat16 data sums its values exactly
// as float32 data sums the same ones; and 16 lanes keep several vector adds in flight.
constexpr int64_t kSumLanes = 16;

// The sum of f(i) over [first, first + count): row sums in A (inner values, at most a plane), which
// the callers add in double.
template <typename A, typename F>
inline A RowSum(int64_t first, int64_t count, F&& f) {
  A lanes[kSumLanes] = {};
  const int64_t end = first + count, whole = first + count / kSumLanes * kSumLanes;
  for (int64_t i = first; i < whole; i += kSumLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kSumLanes; ++l) lanes[l] += f(i + l);
  }
  for (int64_t i = whole; i < end; ++i) lanes[i - whole] += f(i);
  A sum = 0;
  for (const A lane : lanes) sum += lane;
  return sum;
}

// The row sums the statistics need, each a vector loop compiled for the widest vectors the
// processor has (WEFT_CPU_VECTOR_CLONES; the build's baseline is SSE4): sum(x), sum((x - m)^2),
// and sum(dy) and sum(dy * (x - m)) at once (dy masked by relu where y is given).
template <typename T>
WEFT_CPU_VECTOR_CLONES ArithOf<T> SumRow(const T* x, int64_t n) {
  return RowSum<ArithOf<T>>(0, n, [&](int64_t i) { return ToArith(x[i]); });
}
template <typename T>
WEFT_CPU_VECTOR_CLONES ArithOf<T> SquaresRow(const T* x, int64_t n, ArithOf<T> m) {
  return RowSum<ArithOf<T>>(0, n, [&](int64_t i) {
    const ArithOf<T> centred = ToArith(x[i]) - m;
    return centred * centred;
  });
}

// Calls f(first, count) for each contiguous row of channel `ch`: count values from offset first.
template <typename F>
inline void ForEachRowOfChannel(const BnDims& d, int64_t ch, F&& f) {
  for (int64_t o = 0; o < d.outer; ++o) f((o * d.c + ch) * d.inner, d.inner);
}

// Per channel: the mean of x and its biased variance (two passes, as oneDNN's).
template <typename T>
void BatchMoments(const BnDims& d, const T* x, ArithOf<T>* mean, ArithOf<T>* var) {
  using A = ArithOf<T>;
  const double n = static_cast<double>(d.PerChannel());
  ParallelFor(d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      double sum = 0, squares = 0;
      ForEachRowOfChannel(d, ch,
                          [&](int64_t first, int64_t count) { sum += SumRow(x + first, count); });
      const A m = static_cast<A>(sum / n);
      ForEachRowOfChannel(
          d, ch, [&](int64_t first, int64_t count) { squares += SquaresRow(x + first, count, m); });
      mean[ch] = m;
      var[ch] = static_cast<A>(squares / n);
    }
  });
}

// Calls f with the typed pointer of `target`, StagedOutputs' target of an output of type T: T*, or
// float* for a bfloat16 kAddTo, which is staged in float (Bf16AddTo::kInFloat) so that the sum is
// rounded once.
template <typename T, typename F>
void WithTarget(const TensorView& target, F&& f) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (target.dtype() == DType::kFloat32) return f(target.data<float>());
  }
  f(target.data<T>());
}

// y[0, n) = act(x * scale + shift), relu or none: a vector loop (WEFT_CPU_VECTOR_CLONES).
template <typename T, typename Out>
WEFT_CPU_VECTOR_CLONES void NormalizeRow(const T* x, int64_t n, ArithOf<T> scale, ArithOf<T> shift,
                                         bool relu, Out* y) {
  using A = ArithOf<T>;
  if (relu) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i)
      y[i] = FromArith<Out>(fn::ForwardOf<fn::Relu>(ToArith(x[i]) * scale + shift, A(0), A(0)));
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) y[i] = FromArith<Out>(ToArith(x[i]) * scale + shift);
  }
}

// Channel ch's y = x * scale + shift: scale = gamma * invstd, shift = beta - mean * gamma * invstd;
// gamma null: 1.
template <typename A>
struct AffineTerms {
  A scale, shift;
  AffineTerms(const A* gamma, const A* beta, const A* mean, const A* invstd, int64_t ch)
      : scale((gamma ? gamma[ch] : A(1)) * invstd[ch]),
        shift(beta[ch] - mean[ch] * (gamma ? gamma[ch] : A(1)) * invstd[ch]) {}
};

// y = act(x * scale + shift), scale = gamma * invstd, shift = beta - mean * scale; gamma null: 1.
// x, y: (outer, C, inner); the rest (C). Out: T, or float (WithTarget).
template <typename T, typename Out>
void Normalize(const BnCall& c, const T* x, const ArithOf<T>* gamma, const ArithOf<T>* beta,
               const ArithOf<T>* mean, const ArithOf<T>* invstd, Out* y) {
  using A = ArithOf<T>;
  const BnDims& d = c.d;
  ParallelFor(d.outer * d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t ch = row % d.c, first = row * d.inner;
      const AffineTerms<A> t(gamma, beta, mean, invstd, ch);
      NormalizeRow(x + first, d.inner, t.scale, t.shift, c.relu(), y + first);
    }
  });
}

// ---- Loops over blocked images (layout NCHW16c): (N, C / 16, H * W, 16) ----
//
// The same sums and passes over a blocked image, 16 channels at a time: a run of H * W * 16
// values per image and block, position p's 16 channels at p * 16, one vector's lanes. Each
// channel's sum is its run sums (in A) added in double, as the rows' are.

constexpr int64_t kBlock = 16;

// Where image n's run of block b starts.
inline int64_t BlockRun(const BnDims& d, int64_t n, int64_t b) {
  return (n * (d.c / kBlock) + b) * d.inner * kBlock;
}

// Calls f(first, b) for each run (image n, block b) in parallel, its values from `first` on.
template <typename F>
void ForEachRun(const BnDims& d, F&& f) {
  const int64_t blocks = d.c / kBlock;
  ParallelFor(d.outer * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t run = begin; run < end; ++run)
      f(BlockRun(d, run / blocks, run % blocks), run % blocks);
  });
}

// sums[l] += the sum over the run's positions p of f(p * 16 + l), in A.
template <typename A, typename F>
inline void AddBlockSums(int64_t plane, F&& f, double* sums) {
  A lanes[kBlock] = {};
  for (int64_t p = 0; p < plane; ++p) {
#pragma omp simd
    for (int64_t l = 0; l < kBlock; ++l) lanes[l] += f(p * kBlock + l, l);
  }
  for (int64_t l = 0; l < kBlock; ++l) sums[l] += lanes[l];
}

template <typename T>
WEFT_CPU_VECTOR_CLONES void SumBlock(const T* x, int64_t plane, double* sums) {
  AddBlockSums<ArithOf<T>>(
      plane, [&](int64_t i, int64_t) { return ToArith(x[i]); }, sums);
}
template <typename T>
WEFT_CPU_VECTOR_CLONES void SquaresBlock(const T* x, int64_t plane, const ArithOf<T>* m,
                                         double* sums) {
  AddBlockSums<ArithOf<T>>(
      plane,
      [&](int64_t i, int64_t l) {
        const ArithOf<T> centred = ToArith(x[i]) - m[l];
        return centred * centred;
      },
      sums);
}

// BatchMoments of a blocked image.
template <typename T>
void BlockedMoments(const BnDims& d, const T* x, ArithOf<T>* mean, ArithOf<T>* var) {
  using A = ArithOf<T>;
  const double n = static_cast<double>(d.PerChannel());
  ParallelFor(d.c / kBlock, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double sum[kBlock] = {}, squares[kBlock] = {};
      for (int64_t i = 0; i < d.outer; ++i) SumBlock(x + BlockRun(d, i, b), d.inner, sum);
      A* m = mean + b * kBlock;
      for (int64_t l = 0; l < kBlock; ++l) m[l] = static_cast<A>(sum[l] / n);
      for (int64_t i = 0; i < d.outer; ++i)
        SquaresBlock(x + BlockRun(d, i, b), d.inner, m, squares);
      for (int64_t l = 0; l < kBlock; ++l) var[b * kBlock + l] = static_cast<A>(squares[l] / n);
    }
  });
}

// y = act(x * scale + shift) over one run, scale and shift per lane.
template <typename T, typename Out>
WEFT_CPU_VECTOR_CLONES void NormalizeBlock(const T* x, int64_t plane, const ArithOf<T>* scale,
                                           const ArithOf<T>* shift, bool relu, Out* y) {
  using A = ArithOf<T>;
  for (int64_t p = 0; p < plane; ++p) {
#pragma omp simd
    for (int64_t l = 0; l < kBlock; ++l) {
      const A v = ToArith(x[p * kBlock + l]) * scale[l] + shift[l];
      y[p * kBlock + l] = FromArith<Out>(relu ? fn::ForwardOf<fn::Relu>(v, A(0), A(0)) : v);
    }
  }
}

// Normalize of a blocked image.
template <typename T, typename Out>
void BlockedNormalize(const BnCall& c, const T* x, const ArithOf<T>* gamma, const ArithOf<T>* beta,
                      const ArithOf<T>* mean, const ArithOf<T>* invstd, Out* y) {
  using A = ArithOf<T>;
  ForEachRun(c.d, [&](int64_t first, int64_t b) {
    A scale[kBlock], shift[kBlock];
    for (int64_t l = 0; l < kBlock; ++l) {
      const AffineTerms<A> t(gamma, beta, mean, invstd, b * kBlock + l);
      scale[l] = t.scale, shift[l] = t.shift;
    }
    NormalizeBlock(x + first, c.d.inner, scale, shift, c.relu(), y + first);
  });
}

// in: (data, gamma, beta, moving_mean, moving_var); out: (output, saved_mean, saved_invstd).
template <typename T>
void BnForwardLoops(const OpContext& ctx, const BnCall& c, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  using A = ArithOf<T>;
  StagedOutputs staged(ctx, req, out, false, std::span<const size_t>(), Bf16AddTo::kInFloat);
  const T* x = in[0].data<T>();
  A *mean = staged.Target(1).data<A>(), *invstd = staged.Target(2).data<A>();
  if (c.batch) (c.d.blocked ? BlockedMoments<T> : BatchMoments<T>)(c.d, x, mean, invstd);
  FinishStatistics<A>(c, in, staged);
  const A* gamma = c.p.fix_gamma ? nullptr : in[1].data<A>();
  WithTarget<T>(staged.Target(0), [&](auto* y) {
    if (c.d.blocked) return BlockedNormalize(c, x, gamma, in[2].data<A>(), mean, invstd, y);
    Normalize(c, x, gamma, in[2].data<A>(), mean, invstd, y);
  });
  staged.Finish();
}

// What the backward reads of one call: dy masked by relu where y is given, as A. The mask reads
// the stored output, for bfloat16 the rounded one: it rounds to 0 where float32's is positive only
// below 2^-134 (half bfloat16's smallest subnormal), the one place the two paths can differ.
template <typename T>
struct GradInputs {
  using A = ArithOf<T>;
  const T *dy, *x, *y;
  const A *mean, *invstd;
  A Dy(int64_t at) const {
    return y ? fn::BackwardOf<fn::Relu>(ToArith(dy[at]), ToArith(y[at]), A(0)) : ToArith(dy[at]);
  }
  A X(int64_t at) const { return ToArith(x[at]); }
  // The same inputs from element `first` on (the statistics stay per channel).
  GradInputs From(int64_t first) const {
    return {dy + first, x + first, y ? y + first : nullptr, mean, invstd};
  }
};

// sum(dy) and sum(dy * (x - mean)) over a row of n: vector loops (WEFT_CPU_VECTOR_CLONES).
template <typename T>
WEFT_CPU_VECTOR_CLONES ArithOf<T> DySumRow(const GradInputs<T>& g, int64_t n) {
  return RowSum<ArithOf<T>>(0, n, [&](int64_t i) { return g.Dy(i); });
}
template <typename T>
WEFT_CPU_VECTOR_CLONES ArithOf<T> DyXSumRow(const GradInputs<T>& g, int64_t n, ArithOf<T> mean) {
  return RowSum<ArithOf<T>>(0, n, [&](int64_t i) { return g.Dy(i) * (g.X(i) - mean); });
}

// dx[0, n) = scale * (dy - mean_dy - (x - mean) * k) over a row: a vector loop.
template <typename T, typename Out>
WEFT_CPU_VECTOR_CLONES void DataGradRow(const GradInputs<T>& g, int64_t n, ArithOf<T> scale,
                                        ArithOf<T> mean_dy, ArithOf<T> mean, ArithOf<T> k,
                                        Out* dx) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    dx[i] = FromArith<Out>(scale * (g.Dy(i) - mean_dy - (g.X(i) - mean) * k));
}

// Per channel: sum(dy) and sum(dy * x_hat), x_hat = (x - mean) * invstd.
template <typename T>
void GradSums(const BnDims& d, const GradInputs<T>& g, ArithOf<T>* sum_dy,
              ArithOf<T>* sum_dy_xhat) {
  using A = ArithOf<T>;
  ParallelFor(d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t ch = begin; ch < end; ++ch) {
      const A mean = g.mean[ch];
      double a = 0, b = 0;
      ForEachRowOfChannel(d, ch, [&](int64_t first, int64_t count) {
        const GradInputs<T> row = g.From(first);
        a += DySumRow(row, count);
        b += DyXSumRow(row, count, mean);
      });
      sum_dy[ch] = static_cast<A>(a);
      sum_dy_xhat[ch] = static_cast<A>(b * g.invstd[ch]);
    }
  });
}

// dx = scale * (dy - mean_dy - (x - mean) * k) per channel: with batch statistics
// gamma * invstd * (dy - sum_dy / n - x_hat * sum_dy_xhat / n), as x_hat * sum_dy_xhat / n =
// (x - mean) * k with k = invstd * sum_dy_xhat / n; else gamma * invstd * dy. gamma null: 1.
template <typename A>
struct DataGradTerms {
  A scale, mean_dy, k;
  DataGradTerms(const BnCall& c, const A* gamma, const A* invstd, const A* sum_dy,
                const A* sum_dy_xhat, int64_t ch) {
    const A n = static_cast<A>(c.d.PerChannel());
    scale = (gamma ? gamma[ch] : A(1)) * invstd[ch];
    mean_dy = c.batch ? sum_dy[ch] / n : 0;
    k = c.batch ? invstd[ch] * sum_dy_xhat[ch] / n : 0;
  }
};

// dx over (outer, C, inner) rows (DataGradTerms). Out: T, or float (WithTarget).
template <typename T, typename Out>
void DataGrad(const BnCall& c, const GradInputs<T>& g, const ArithOf<T>* gamma,
              const ArithOf<T>* sum_dy, const ArithOf<T>* sum_dy_xhat, Out* dx) {
  const BnDims& d = c.d;
  ParallelFor(d.outer * d.c, 1, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t ch = row % d.c, first = row * d.inner;
      const DataGradTerms<ArithOf<T>> t(c, gamma, g.invstd, sum_dy, sum_dy_xhat, ch);
      DataGradRow(g.From(first), d.inner, t.scale, t.mean_dy, g.mean[ch], t.k, dx + first);
    }
  });
}

// sum(dy) and sum(dy * (x - mean)) over one run of a blocked image, per lane.
template <typename T>
WEFT_CPU_VECTOR_CLONES void GradSumsBlock(const GradInputs<T>& g, int64_t plane,
                                          const ArithOf<T>* mean, double* dy, double* dy_x) {
  AddBlockSums<ArithOf<T>>(
      plane, [&](int64_t i, int64_t) { return g.Dy(i); }, dy);
  AddBlockSums<ArithOf<T>>(
      plane, [&](int64_t i, int64_t l) { return g.Dy(i) * (g.X(i) - mean[l]); }, dy_x);
}

// GradSums of a blocked image.
template <typename T>
void BlockedGradSums(const BnDims& d, const GradInputs<T>& g, ArithOf<T>* sum_dy,
                     ArithOf<T>* sum_dy_xhat) {
  using A = ArithOf<T>;
  ParallelFor(d.c / kBlock, 1, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      double a[kBlock] = {}, x[kBlock] = {};
      for (int64_t i = 0; i < d.outer; ++i)
        GradSumsBlock(g.From(BlockRun(d, i, b)), d.inner, g.mean + b * kBlock, a, x);
      for (int64_t l = 0, ch = b * kBlock; l < kBlock; ++l, ++ch) {
        sum_dy[ch] = static_cast<A>(a[l]);
        sum_dy_xhat[ch] = static_cast<A>(x[l] * g.invstd[ch]);
      }
    }
  });
}

// dx = scale * (dy - mean_dy - (x - mean) * k) over one run, each per lane.
template <typename T, typename Out>
WEFT_CPU_VECTOR_CLONES void DataGradBlock(const GradInputs<T>& g, int64_t plane,
                                          const ArithOf<T>* scale, const ArithOf<T>* mean_dy,
                                          const ArithOf<T>* mean, const ArithOf<T>* k, Out* dx) {
  for (int64_t p = 0; p < plane; ++p) {
#pragma omp simd
    for (int64_t l = 0; l < kBlock; ++l) {
      const int64_t i = p * kBlock + l;
      dx[i] = FromArith<Out>(scale[l] * (g.Dy(i) - mean_dy[l] - (g.X(i) - mean[l]) * k[l]));
    }
  }
}

// DataGrad of a blocked image.
template <typename T, typename Out>
void BlockedDataGrad(const BnCall& c, const GradInputs<T>& g, const ArithOf<T>* gamma,
                     const ArithOf<T>* sum_dy, const ArithOf<T>* sum_dy_xhat, Out* dx) {
  using A = ArithOf<T>;
  ForEachRun(c.d, [&](int64_t first, int64_t b) {
    A scale[kBlock], mean_dy[kBlock], k[kBlock];
    for (int64_t l = 0; l < kBlock; ++l) {
      const DataGradTerms<A> t(c, gamma, g.invstd, sum_dy, sum_dy_xhat, b * kBlock + l);
      scale[l] = t.scale, mean_dy[l] = t.mean_dy, k[l] = t.k;
    }
    DataGradBlock(g.From(first), c.d.inner, scale, mean_dy, g.mean + b * kBlock, k, dx + first);
  });
}

// in: as BnBackwardInput places them; out: (d_data, d_gamma, d_beta).
template <typename T>
void BnBackwardLoops(const OpContext& ctx, const BnCall& c, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  using A = ArithOf<T>;
  StagedOutputs staged(ctx, req, out, false, std::span<const size_t>(), Bf16AddTo::kInFloat);
  const GradInputs<T> g{in[kBnOutGrad].data<T>(), in[kBnData].data<T>(),
                        c.relu() ? in[kBnOutput].data<T>() : nullptr, in[kBnSavedMean].data<A>(),
                        in[kBnSavedInvstd].data<A>()};
  A *sum_dy_xhat = staged.Target(1).data<A>(), *sum_dy = staged.Target(2).data<A>();
  (c.d.blocked ? BlockedGradSums<T> : GradSums<T>)(c.d, g, sum_dy, sum_dy_xhat);
  if (staged.Needed(0)) {
    const A* gamma = c.p.fix_gamma ? nullptr : in[kBnGamma].data<A>();
    WithTarget<T>(staged.Target(0), [&](auto* dx) {
      if (c.d.blocked) return BlockedDataGrad(c, g, gamma, sum_dy, sum_dy_xhat, dx);
      DataGrad(c, g, gamma, sum_dy, sum_dy_xhat, dx);
    });
  }
  if (c.p.fix_gamma) std::fill_n(sum_dy_xhat, c.d.c, A(0));
  staged.Finish();
}

// ---- compute ----

void BnForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
               std::span<const OpReq> req, std::span<const TensorView> out) {
  const BnCall c = CallOf("BatchNorm", a, in[0].shape(), ctx.is_train);
  WEFT_FLOAT_BF16_SWITCH(in[0].dtype(), T, "BatchNorm", BnForwardLoops<T>(ctx, c, in, req, out));
}

void BnBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                std::span<const OpReq> req, std::span<const TensorView> out) {
  const BnCall c = CallOf("_backward_BatchNorm", a, in[kBnData].shape(), ctx.is_train);
  WEFT_FLOAT_BF16_SWITCH(in[kBnData].dtype(), T, "_backward_BatchNorm",
                         BnBackwardLoops<T>(ctx, c, in, req, out));
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"BatchNorm", {.compute = BnForward}},
                                                 {"_backward_BatchNorm", {.compute = BnBackward}},
                                             });

}  // namespace
}  // namespace weft::cpu
