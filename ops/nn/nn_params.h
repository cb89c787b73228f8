// The parameter structs of the neural-network ops, device neutral: the definitions (ops/nn/*.cc)
// parse them, and the CPU and GPU computes read them through Attrs::Get<P>(), so a default or a
// check lives in one place. Each definition file documents what its op computes.
//
//   const FcParam& p = attrs.Get<FcParam>();
//   const FcDims d = FcDimsOf(p, data.shape());   // the (M, K) x (O, K)^T product of one call
//   const PoolCall call = PoolCallOf(attrs, data.shape());
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "ops/attrs.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/nn/window2d.h"

namespace weft {

// ---- FullyConnected, _backward_FullyConnected ----

struct FcParam {
  int num_hidden;
  bool no_bias;
  bool flatten;
  // An activation applied to the output in the same call (an epilogue: oneDNN's post-op,
  // cuBLASLt's); none by default. passes/fold_activation.h sets it for inference.
  std::optional<ActType> act;
  // The dtype _backward_FullyConnected writes d_weight and d_bias in where it is not the data's:
  // float32 for 16-bit data (passes/fold_grad_cast.h sets it on the backward node, folding the
  // _backward_Cast that brought a 16-bit weight copy's gradient to its float32 master). The
  // forward ignores it.
  std::optional<DType> param_grad_dtype;
};

// The (M, K) x (O, K)^T product of one call.
struct FcDims {
  int64_t m, k, o;
};

// data (N, d1, ..., dk) seen as (M, K): (N, d1 * ... * dk) with flatten, else (N * ... * dk-1, dk).
FcDims FcDimsOf(const FcParam& p, const Shape& data);

// ---- BatchNorm, _backward_BatchNorm (ops/nn/batch_norm.cc) ----

enum class BnAct : uint8_t { kNone, kRelu };

struct BatchNormParam {
  double eps;             // > 0, added to the variance
  double momentum;        // in [0, 1]: running = momentum * running + (1 - momentum) * batch
  bool fix_gamma;         // gamma read as 1; its gradient is 0
  bool use_global_stats;  // normalize with the moving statistics, in training too
  int axis;               // the channel axis as given (BnDimsOf checks it against data)
  BnAct act;              // kRelu: relu after the affine step, fused
  bool blocked;           // layout "NCHW16c" (window2d.h; CPU only): data and output blocked
};

// Data of rank 2 to 5 seen around its channel axis as (outer, C, inner): the NC... layout oneDNN
// and cuDNN normalize. (N, C, H, W) with axis 1 is (N, C, H * W); (N, T, C) with axis -1 is
// (N * T, C, 1).
struct BnDims {
  int64_t outer, c, inner;
  bool blocked = false;  // (N, C / 16, H * W, 16): layout NCHW16c of a BlockedImage
  int64_t PerChannel() const { return outer * inner; }  // the values each channel normalizes
};

// _backward_BatchNorm's inputs by position: BatchNorm's out_grad, data, gamma, beta, saved_mean,
// saved_invstd, and its output with act_type relu only.
enum BnBackwardInput : int {
  kBnOutGrad,
  kBnData,
  kBnGamma,
  kBnBeta,
  kBnSavedMean,
  kBnSavedInvstd,
  kBnOutput,
};

// Throws, naming `op`, unless data has rank 2 to 5, no empty axis, and p.axis is one of its axes.
BnDims BnDimsOf(const char* op, const BatchNormParam& p, const Shape& data);
// Throws, naming `op`, unless each channel has more than one value (a batch variance needs two).
void CheckBatchStatistics(const char* op, const BnDims& d, const Shape& data);
// The dtype of gamma, beta and the moving and saved statistics for data of dtype `data`:
// float32 (float32 and bfloat16 data), float64 for float64 data.
DType BnStatType(DType data);
// For BatchNorm and LayerNorm: checks that in[data] is float32, float64 or 16-bit and that each
// of in[first, last) (named names[i]) has the statistics' dtype (BnStatType); returns data's. The
// errors name `op`.
DType CheckNormTypes(const char* op, const std::vector<DType>& in, size_t data, size_t first,
                     size_t last, const char* const* names);

// ---- LayerNorm, _backward_LayerNorm (ops/nn/layer_norm.cc) ----

struct LayerNormParam {
  double eps;  // > 0, added to the variance
  int axis;    // the normalized axis as given (LnDimsOf checks it against data)
  // The output's dtype (and the out_grad's of the backward) where it is not the data's: bfloat16
  // or float16 for float32 data (passes/mixed_precision.h folds a Cast of the output into it).
  std::optional<DType> out_dtype;
};

// Data seen around its normalized axis as (outer, C, inner): each of the outer * inner rows (o, i)
// normalizes its C values at (o * C + j) * inner + i, j < C. (B, T, C) with axis -1 is
// (B * T, C, 1): rows of contiguous values; (N, C, L) with axis 1 is (N, C, L).
struct LnDims {
  int64_t outer, c, inner;
  int64_t Rows() const { return outer * inner; }  // the mean and rstd of one call: one a row
};

// _backward_LayerNorm's inputs by position: LayerNorm's out_grad, data, gamma, and its hidden
// outputs mean and rstd.
enum LnBackwardInput : int { kLnOutGrad, kLnData, kLnGamma, kLnMean, kLnRstd };

// Throws, naming `op`, unless data has no empty axis and p.axis is one of its axes.
LnDims LnDimsOf(const char* op, const LayerNormParam& p, const Shape& data);
// The shape of the mean and rstd: data's with the normalized axis 1 (MXNet's), e.g. (B, T, 1).
Shape LnStatShape(const LayerNormParam& p, const Shape& data);

// ---- Convolution, _backward_Convolution ----

struct ConvParam {
  Window2d window;  // with `dilate`
  int num_filter;
  int num_group;  // divides num_filter (checked when parsed) and the channels (at inference)
  bool no_bias;
  std::optional<ActType> act;  // an activation epilogue, as FcParam's
  bool with_sum = false;       // a fourth input added before the epilogue (convolution.cc)
};

// Extents of one call: the window geometry, the filter count and the groups.
struct ConvDims {
  Geometry2d g;
  int64_t f;
  int64_t groups;

  Shape Output() const { return g.Out(f); }  // (N, F, OH, OW), or (N, OH, OW, F) channels last
  // (F, C / groups, kh, kw), MXNet's and PyTorch's layout.
  Shape Weight(const Window2d& win) const {
    return Shape{f, g.c / groups, win.kernel[0], win.kernel[1]};
  }
};

// Checks `data` against the window and the groups (the channels divisible by num_group); the
// errors name `op`.
ConvDims ConvDimsOf(const char* op, const ConvParam& p, const Shape& data);

// ---- _conv_depthwise (ops/nn/conv_depthwise.cc) ----

// A 1x1 convolution and the 3x3 depthwise convolution that alone reads it, as one op.
struct ConvDepthwiseParam {
  ConvParam conv;       // 1x1, stride 1, no padding, one group, a bias, layout NHWC
  ConvParam depthwise;  // 3x3, stride 1 or 2, padding 1, a group per channel, a bias, NHWC
};

// The op's attributes (the pass that makes it builds them; they are never parsed).
Attrs ConvDepthwiseAttrs(const ConvDepthwiseParam& p);

// ---- Pooling, _backward_Pooling ----

enum class PoolType : uint8_t { kMax, kAvg };

struct PoolParam {
  Window2d window;  // ignored when global; ceil set by pooling_convention "full"
  PoolType type;
  bool global;
  // avg: divide by the window's taps in the padded input, else only by those in the input.
  bool count_include_pad;
};

// What one call computes: `type` pooling with this window over data of this geometry.
struct PoolCall {
  Window2d win;
  Geometry2d g;
  PoolType type;
  bool count_include_pad;
};

// (N, C, OH, OW), or (N, OH, OW, C) channels last.
inline Shape PoolOutputShape(const Geometry2d& g) { return g.Out(g.c); }

// The window is the attributes', or the whole plane for global pooling; checks `data`.
PoolCall PoolCallOf(const Attrs& a, const Shape& data);

// ---- softmax, log_softmax and their backward ops ----

struct SoftmaxParam {
  int axis;  // as given: checked against the input's axes by shape inference
};

// ---- Dropout ----

struct DropoutParam {
  double p;  // in [0, 1)
};

// ---- Embedding, _backward_Embedding ----

struct EmbeddingParam {
  int input_dim;
  int output_dim;
};

// The dtypes Embedding takes for its indices (data), whatever its weights' (float32, float64,
// bfloat16, float16): ops/nn/embedding.cc checks them, each device's compute dispatches on them.
inline constexpr DType kEmbeddingIndexTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                                 DType::kFloat16, DType::kInt32,   DType::kInt64};

}  // namespace weft
