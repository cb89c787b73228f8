// Convolution: 2-D cross-correlation over NCHW data, grouped and dilated.
//
// layout "NHWC" (default "NCHW"): data (N, H, W, C) and output (N, OH, OW, F), the same sums
// (ops/nn/window2d.h); the weight keeps its layout. The CPU computes it (oneDNN's channels-last
// kernels need no reorder of the data); the GPU refuses it, naming the op. passes/channels_last.h
// turns a CPU inference graph's convolutions to it.
//
//   data    (N, C, H, W)
//   weight  (F, C / G, kh, kw)      F = num_filter, G = num_group, (kh, kw) = kernel
//   bias    (F,)                    absent when no_bias
//   output  (N, F, OH, OW)          OH = floor((H + 2 * pad_h - dilate_h * (kh - 1) - 1) /
//   stride_h)
//                                   + 1, the same for OW (ops/nn/window2d.h)
//   output[n, f, y, x] = bias[f] + sum_{c, i, j} data[n, g * C/G + c, y * stride_h - pad_h +
//                        i * dilate_h, x * stride_w - pad_w + j * dilate_w] * weight[f, c, i, j]
//   with g = f / (F / G) the filter's group, c over the group's C / G channels, and taps in the
//   padding contributing zero. G = C = F is a depthwise convolution. MXNet's attributes and
//   PyTorch's weight layout (torch.nn.functional.conv2d with groups, dilation).
//
// num_group divides num_filter and the channels; dilate (default (1, 1)) and stride are at least
// 1, and the dilated kernel must fit in the padded input.
//
// act_type (default "none"): an activation applied to the output in the same call, an epilogue
// (oneDNN's post-op; a kernel after cuDNN's convolution), as FullyConnected's (its header says
// more); passes/fold_activation.h sets it on inference graphs.
//
// with_sum (default false; needs the bias): a fourth input `sum` of the output's shape, added
// before the activation: output = act(conv + bias + sum), a residual block's join in the
// convolution's own pass (oneDNN's sum post-op, writing over `sum` where the memory plan lets the
// output share its buffer). Its gradient is the gradient before the activation. CPU only (the GPU
// refuses it, naming the op); passes/fold_sum.h sets it on CPU inference graphs.
//
// _backward_Convolution takes (out_grad, data, weight) and gives (d_data, d_weight, d_bias),
// without d_bias when no_bias (out_grad: the gradient before the activation). Compute:
// ops/cpu/convolution.cc, ops/gpu/convolution.cc.
#include "core/error.h"
#include "ops/nn/internal/layer_op.h"
#include "ops/nn/nn_params.h"
#include "ops/nn/window2d.h"
#include "ops/op.h"

namespace weft {
namespace {

ConvParam ParseConv(AttrReader& r) {
  ConvParam p{ParseWindow2d(r, std::nullopt),
              r.Int("num_filter", std::nullopt, 1),
              r.Int("num_group", 1, 1),
              r.Bool("no_bias", false),
              ReadLayerAct(r),
              r.Bool("with_sum", false)};
  ParseDilate(r, p.window);
  ParseLayout(r, p.window);
  if (p.with_sum && p.no_bias) {
    WEFT_THROW(
        "op 'Convolution': attribute 'with_sum': expected a bias with it (no_bias false), "
        "found no_bias true");
  }
  if (p.num_filter % p.num_group != 0) {
    WEFT_THROW("op 'Convolution': attribute 'num_filter': expected a multiple of num_group "
               << p.num_group << ", found " << p.num_filter);
  }
  return p;
}

// Checks data, weight, (unless no_bias) bias and (with_sum) sum.
ConvDims CheckConv(const ConvParam& p, const std::vector<Shape>& in) {
  const ConvDims d = ConvDimsOf("Convolution", p, in[0]);
  const Shape weight = d.Weight(p.window);
  if (in[1] != weight) WEFT_THROW("Convolution: weight must be " << weight << ", found " << in[1]);
  if (!p.no_bias && in[2] != Shape{d.f})
    WEFT_THROW("Convolution: bias must be " << Shape{d.f} << ", found " << in[2]);
  if (p.with_sum && in[3] != d.Output())
    WEFT_THROW("Convolution: sum must be the output's shape " << d.Output() << ", found " << in[3]);
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
  p.with_sum = false;
  const Shape out = CheckConv(p, {in[1], in[2]}).Output();
  if (in[0] != out)
    WEFT_THROW("_backward_Convolution: out_grad must be " << out << ", found " << in[0]);
  if (!bias) return {in[1], in[2]};
  return {in[1], in[2], Shape{p.num_filter}};
}

// weight (F, C / G, kh, kw) and bias (F,) from data (N, C, H, W) or (N, H, W, C).
void ConvInputShapes(const Attrs& a, std::vector<std::optional<Shape>>& in) {
  const ConvParam& p = a.Get<ConvParam>();
  if (!in[0] || in[0]->ndim() != 4) return;
  const int64_t channels = (*in[0])[p.window.channels_last ? 3 : 1] / p.num_group;
  if (!in[1]) in[1] = Shape{p.num_filter, channels, p.window.kernel[0], p.window.kernel[1]};
  if (in.size() > 2 && !in[2]) in[2] = Shape{p.num_filter};
}

const bool defined = [] {
  DefineLayerOp<ConvParam>(
      {"Convolution",
       "2-D convolution (cross-correlation) over NCHW (or layout NHWC) data with an (F, C / "
       "num_group, kh, kw) weight; num_group (grouped, depthwise) and dilate as MXNet",
       ParseConv, ConvShape, ConvBackwardShape, ConvInputShapes});
  return true;
}();

}  // namespace
}  // namespace weft
