// Pooling: 2-D max or average pooling over NCHW data.
//
// layout "NHWC" (default "NCHW"): data (N, H, W, C), output (N, OH, OW, C); CPU only, as
// Convolution's.
//
//   data    (N, C, H, W)
//   output  (N, C, OH, OW)   pooling_convention "valid" (default): OH = floor((H + 2 * pad_h - kh)
//                            / stride_h) + 1; "full": ceil instead of floor, less one where the
//                            last window would start in the right padding (PyTorch's
//                            ceil_mode=True); the same for OW (ops/nn/window2d.h); global_pool: (N,
//                            C, 1, 1)
//
// pool_type max: the largest of the window's taps inside the input; padding never wins.
// pool_type avg: the sum of the taps inside the input divided by
//   count_include_pad true (default, MXNet's and PyTorch's): the window's taps in the padded input
//     [-pad, H + pad), i.e. padding counts as zeros; kh * kw except for a window of the "full"
//     convention that reaches past the padding;
//   count_include_pad false: the window's taps inside the input (PyTorch's
//   count_include_pad=False).
// pad must be smaller than the kernel on each axis, so that every window covers input.
// global_pool: the window is the whole (H, W) plane, stride (1, 1), pad (0, 0); kernel, stride and
//   pad are then ignored and may be left out.
//
// _backward_Pooling takes (out_grad, data) and gives d_data. Max pooling sends each window's
// gradient to its largest input. Compute: ops/cpu/pooling.cc, ops/gpu/pooling.cc.
#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/nn/nn_params.h"
#include "ops/nn/window2d.h"
#include "ops/op.h"

namespace weft {
namespace {

PoolParam ParsePool(AttrReader& r) {
  const bool global = r.Bool("global_pool", false);
  const PoolType type = r.Choice<PoolType>(
      "pool_type", {{"max", PoolType::kMax}, {"avg", PoolType::kAvg}}, PoolType::kMax);
  Window2d win = ParseWindow2d(r, global ? std::optional<Shape>(Shape{1, 1}) : std::nullopt);
  win.ceil = r.Choice<bool>("pooling_convention", {{"valid", false}, {"full", true}}, false);
  ParseLayout(r, win);
  const bool count_include_pad = r.Bool("count_include_pad", true);
  if (!global && (win.pad[0] >= win.kernel[0] || win.pad[1] >= win.kernel[1])) {
    WEFT_THROW("op 'Pooling': attribute 'pad': expected less than the kernel "
               << Shape({win.kernel[0], win.kernel[1]}) << " on each axis, found "
               << Shape({win.pad[0], win.pad[1]}));
  }
  return {win, type, global, count_include_pad};
}

std::vector<Shape> PoolShape(const Attrs& a, const std::vector<Shape>& in) {
  return {PoolOutputShape(PoolCallOf(a, in[0]).g)};
}

// in: (out_grad, data).
std::vector<Shape> PoolBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const Shape out = PoolOutputShape(PoolCallOf(a, in[1]).g);
  if (in[0] != out)
    WEFT_THROW("_backward_Pooling: out_grad must be " << out << ", found " << in[0]);
  return {in[1]};
}

const bool defined = [] {
  WEFT_REGISTER_OP(Pooling)
      .Describe(
          "2-D max or average pooling over NCHW (or layout NHWC) data; avg counts padding as zeros "
          "unless count_include_pad is false; pooling_convention 'full' is ceil mode")
      .Params(ParsePool)
      .Inputs({"data"})
      .InferShape(PoolShape)
      .Gradient(GradientFromBackwardOp("Pooling"));
  WEFT_REGISTER_OP(_backward_Pooling)
      .Describe("gradient of Pooling")
      .Params(ParsePool)
      .Inputs({"out_grad", "data"})
      .InferShape(PoolBackwardShape);
  return true;
}();

}  // namespace
}  // namespace weft
