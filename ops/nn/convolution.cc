// Convolution: 2-D cross-correlation over NCHW data (no dilation, no groups).
//
//   data    (N, C, H, W)
//   weight  (F, C, kh, kw)          F = num_filter, (kh, kw) = kernel
//   bias    (F,)                    absent when no_bias
//   output  (N, F, OH, OW)          OH = (H + 2 * pad_h - kh) / stride_h + 1 (floor; the same for
//   OW) output[n, f, y, x] = bias[f] + sum_{c, i, j} data[n, c, y * stride_h - pad_h + i,
//                                                   x * stride_w - pad_w + j] * weight[f, c, i, j]
//   with taps in the padding contributing zero.
//
// _backward_Convolution takes (out_grad, data, weight) and gives (d_data, d_weight, d_bias),
// without d_bias when no_bias. Compute: ops/cpu/convolution.cc, ops/gpu/convolution.cc.
#include "core/error.h"
#include "ops/nn/internal/layer_op.h"
#include "ops/nn/nn_params.h"
#include "ops/nn/window2d.h"
#include "ops/op.h"

namespace weft {
namespace {

ConvParam ParseConv(AttrReader& r) {
  return {ParseWindow2d(r, std::nullopt), r.Int("num_filter", std::nullopt, 1),
          r.Bool("no_bias", false)};
}

// Checks data, weight and (unless no_bias) bias.
ConvDims CheckConv(const ConvParam& p, const std::vector<Shape>& in) {
  const Window2d& win = p.window;
  const ConvDims d{Geometry2dOf("Convolution", win, in[0]), p.num_filter};
  const Shape weight{d.f, d.g.c, win.kernel[0], win.kernel[1]};
  if (in[1] != weight) WEFT_THROW("Convolution: weight must be " << weight << ", found " << in[1]);
  if (!p.no_bias && in[2] != Shape{d.f})
    WEFT_THROW("Convolution: bias must be " << Shape{d.f} << ", found " << in[2]);
  return d;
}

std::vector<Shape> ConvShape(const Attrs& a, const std::vector<Shape>& in) {
  return {CheckConv(a.Get<ConvParam>(), in).Output()};
}

// in: (out_grad, data, weight).
std::vector<Shape> ConvBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  ConvParam p = a.Get<ConvParam>();
  const bool bias = !p.no_bias;
  p.no_bias = true;
  const Shape out = CheckConv(p, {in[1], in[2]}).Output();
  if (in[0] != out)
    WEFT_THROW("_backward_Convolution: out_grad must be " << out << ", found " << in[0]);
  if (!bias) return {in[1], in[2]};
  return {in[1], in[2], Shape{p.num_filter}};
}

// weight (F, C, kh, kw) and bias (F,) from data (N, C, H, W).
void ConvInputShapes(const Attrs& a, std::vector<std::optional<Shape>>& in) {
  const ConvParam& p = a.Get<ConvParam>();
  if (!in[0] || in[0]->ndim() != 4) return;
  if (!in[1]) in[1] = Shape{p.num_filter, (*in[0])[1], p.window.kernel[0], p.window.kernel[1]};
  if (in.size() > 2 && !in[2]) in[2] = Shape{p.num_filter};
}

const bool defined = [] {
  DefineLayerOp<ConvParam>(
      {"Convolution",
       "2-D convolution (cross-correlation) over NCHW data with an (F, C, kh, kw) weight",
       ParseConv, ConvShape, ConvBackwardShape, ConvInputShapes});
  return true;
}();

}  // namespace
}  // namespace weft
