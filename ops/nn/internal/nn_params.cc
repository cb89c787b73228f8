#include "ops/nn/nn_params.h"

#include "core/error.h"

namespace weft {

FcDims FcDimsOf(const FcParam& p, const Shape& data) {
  const int64_t k = p.flatten ? data.Size() / data[0] : data[data.ndim() - 1];
  return {data.Size() / k, k, p.num_hidden};
}

ConvDims ConvDimsOf(const char* op, const ConvParam& p, const Shape& data) {
  const ConvDims d{Geometry2dOf(op, p.window, data), p.num_filter, p.num_group};
  if (d.g.c % d.groups != 0) {
    WEFT_THROW(op << ": data's channels must be divisible by num_group " << d.groups << ", found "
                  << d.g.c << " channels in " << data);
  }
  return d;
}

namespace {

// The window of one call: the attributes', or the whole plane for global pooling.
Window2d WindowOf(const PoolParam& p, const Shape& data) {
  if (!p.global || data.ndim() != 4) return p.window;
  Window2d win = p.window.channels_last ? Window2d{{data[1], data[2]}, {1, 1}, {0, 0}}
                                        : Window2d{{data[2], data[3]}, {1, 1}, {0, 0}};
  win.channels_last = p.window.channels_last;
  win.blocked = p.window.blocked;
  return win;
}

}  // namespace

PoolCall PoolCallOf(const Attrs& a, const Shape& data) {
  const PoolParam& p = a.Get<PoolParam>();
  const Window2d win = WindowOf(p, data);
  return {win, Geometry2dOf("Pooling", win, data), p.type, p.count_include_pad};
}

}  // namespace weft
