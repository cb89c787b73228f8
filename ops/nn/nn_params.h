// The parameter structs of the neural-network ops, device neutral: the definitions (ops/nn/*.cc)
// parse them, and the CPU and GPU computes read them through Attrs::Get<P>(), so a default or a
// check lives in one place. Each definition file documents what its op computes.
//
//   const FcParam& p = attrs.Get<FcParam>();
//   const FcDims d = FcDimsOf(p, data.shape());   // the (M, K) x (O, K)^T product of one call
//   const PoolCall call = PoolCallOf(attrs, data.shape());
#pragma once

#include <cstdint>

#include "core/shape.h"
#include "ops/attrs.h"
#include "ops/nn/window2d.h"

namespace weft {

// ---- FullyConnected, _backward_FullyConnected ----

struct FcParam {
  int num_hidden;
  bool no_bias;
  bool flatten;
};

// The (M, K) x (O, K)^T product of one call.
struct FcDims {
  int64_t m, k, o;
};

// data (N, d1, ..., dk) seen as (M, K): (N, d1 * ... * dk) with flatten, else (N * ... * dk-1, dk).
FcDims FcDimsOf(const FcParam& p, const Shape& data);

// ---- Convolution, _backward_Convolution ----

struct ConvParam {
  Window2d window;  // with `dilate`
  int num_filter;
  int num_group;  // divides num_filter (checked when parsed) and the channels (at inference)
  bool no_bias;
};

// Extents of one call: the window geometry, the filter count and the groups.
struct ConvDims {
  Geometry2d g;
  int64_t f;
  int64_t groups;

  Shape Output() const { return Shape{g.n, f, g.oh, g.ow}; }  // (N, F, OH, OW)
  // (F, C / groups, kh, kw), MXNet's and PyTorch's layout.
  Shape Weight(const Window2d& win) const {
    return Shape{f, g.c / groups, win.kernel[0], win.kernel[1]};
  }
};

// Checks `data` against the window and the groups (the channels divisible by num_group); the
// errors name `op`.
ConvDims ConvDimsOf(const char* op, const ConvParam& p, const Shape& data);

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

// (N, C, OH, OW).
inline Shape PoolOutputShape(const Geometry2d& g) { return Shape{g.n, g.c, g.oh, g.ow}; }

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

}  // namespace weft
