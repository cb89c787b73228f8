#include "ops/nn/nn_params.h"

namespace weft {

FcDims FcDimsOf(const FcParam& p, const Shape& data) {
  const int64_t k = p.flatten ? data.Size() / data[0] : data[data.ndim() - 1];
  return {data.Size() / k, k, p.num_hidden};
}

namespace {

// The window of one call: the attributes', or the whole plane for global pooling.
Window2d WindowOf(const PoolParam& p, const Shape& data) {
  if (!p.global || data.ndim() != 4) return p.window;
  return Window2d{{data[2], data[3]}, {1, 1}, {0, 0}};
}

}  // namespace

PoolCall PoolCallOf(const Attrs& a, const Shape& data) {
  const PoolParam& p = a.Get<PoolParam>();
  const Window2d win = WindowOf(p, data);
  return {win, Geometry2dOf("Pooling", win, data), p.type};
}

}  // namespace weft
