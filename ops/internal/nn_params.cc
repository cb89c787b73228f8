#include "ops/internal/nn_params.h"

#include "core/error.h"

namespace weft::cpu {

FcParam ParseFc(AttrReader& r) {
  return {r.Int("num_hidden", std::nullopt, 1), r.Bool("no_bias", false), r.Bool("flatten", true)};
}

FcDims FcDimsOf(const FcParam& p, const Shape& data) {
  const int64_t k = p.flatten ? data.Size() / data[0] : data[data.ndim() - 1];
  return {data.Size() / k, k, p.num_hidden};
}

ConvParam ParseConv(AttrReader& r) {
  return {ParseWindow2d(r, std::nullopt), r.Int("num_filter", std::nullopt, 1), r.Bool("no_bias", false)};
}

PoolParam ParsePool(AttrReader& r) {
  const bool global = r.Bool("global_pool", false);
  const bool max = r.Choice<bool>("pool_type", {{"max", true}, {"avg", false}}, true);
  const Window2d win = ParseWindow2d(r, global ? std::optional<Shape>(Shape{1, 1}) : std::nullopt);
  if (!global && (win.pad[0] >= win.kernel[0] || win.pad[1] >= win.kernel[1])) {
    WEFT_THROW("op 'Pooling': attribute 'pad': expected less than the kernel "
               << Shape({win.kernel[0], win.kernel[1]}) << " on each axis, found " << Shape({win.pad[0], win.pad[1]}));
  }
  return {win, max, global};
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
  return {win, Geometry2dOf("Pooling", win, data), p.max};
}

SoftmaxParam ParseSoftmax(AttrReader& r) { return {r.Int("axis", -1)}; }

}  // namespace weft::cpu
