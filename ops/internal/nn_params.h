// The parsed attributes of the neural-network layer ops, shared by their CPU and GPU computes:
// both read the same struct through Attrs::Get<P>(), so it is defined once, here. Each op's CPU
// file (ops/cpu/*.cc) documents what the op computes.
//
//   const FcParam& p = attrs.Get<FcParam>();
//   const FcDims d = FcDimsOf(p, data.shape());   // the (M, K) x (O, K)^T product of one call
//   const PoolCall call = PoolCallOf(attrs, data.shape());
#pragma once

#include <cstdint>

#include "core/shape.h"
#include "ops/attrs.h"
#include "ops/internal/window2d.h"

namespace weft::cpu {

// ---- FullyConnected ----

struct FcParam {
  int num_hidden;
  bool no_bias;
  bool flatten;
};

FcParam ParseFc(AttrReader& r);

// The (M, K) x (O, K)^T product of one call.
struct FcDims {
  int64_t m, k, o;
};

// data (N, d1, ..., dk) seen as (M, K): (N, d1 * ... * dk) with flatten, else (N * ... * dk-1, dk).
FcDims FcDimsOf(const FcParam& p, const Shape& data);

// ---- Convolution ----

struct ConvParam {
  Window2d window;
  int num_filter;
  bool no_bias;
};

ConvParam ParseConv(AttrReader& r);

// Extents of one call: the window geometry and the filter count.
struct ConvDims {
  Geometry2d g;
  int64_t f;
};

// ---- Pooling ----

struct PoolParam {
  Window2d window;  // ignored when global
  bool max;
  bool global;
};

PoolParam ParsePool(AttrReader& r);

// What one call computes: max or avg pooling with this window over data of this geometry.
struct PoolCall {
  Window2d win;
  Geometry2d g;
  bool max;
};

// The window is the attributes', or the whole plane for global pooling; checks `data`.
PoolCall PoolCallOf(const Attrs& a, const Shape& data);

// ---- softmax, log_softmax ----

struct SoftmaxParam {
  int axis;
};

SoftmaxParam ParseSoftmax(AttrReader& r);

}  // namespace weft::cpu
