// amp_update_scale: one step of the dynamic loss scaler (ops/math/optimizer.h, UpdateLossScale;
// PyTorch's _amp_update_scale_). Inputs: the gradients' sum of squares (float32, one element:
// multi_sum_sq and sum over every gradient, so the all-finite check is that one reduction), the
// scale and the count of clean steps (float32, one element each), which it updates in place.
// Output: the step's gradient multiplier, 1 / the scale the step ran with, or NaN when the sum is
// not finite; the updates read it (scale_input) and write nothing when it is NaN. Attributes:
// growth_factor (2), backoff_factor (0.5), growth_interval (2000), max_scale (2^24). No gradient.
// Compute: ops/cpu/optimizer.cc, ops/gpu/optimizer.cc; everything stays on the device.
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/math/optimizer.h"
#include "ops/op.h"

namespace weft {
namespace {

fn::LossScaleParam ParseLossScale(AttrReader& r) {
  fn::LossScaleParam p{};
  p.growth_factor = r.Float("growth_factor", 2.0);
  p.backoff_factor = r.Float("backoff_factor", 0.5);
  p.max_scale = r.Float("max_scale", 16777216.0);
  p.growth_interval = r.Int("growth_interval", 2000, 1, 1 << 24);  // a float32 count: exact
  if (!(p.growth_factor >= 1)) {
    WEFT_THROW(r.op() << ": attribute 'growth_factor': expected >= 1, found " << p.growth_factor);
  }
  if (!(p.backoff_factor > 0 && p.backoff_factor < 1)) {
    WEFT_THROW(r.op() << ": attribute 'backoff_factor': expected in (0, 1), found "
                      << p.backoff_factor);
  }
  if (!(p.max_scale > 0 && p.max_scale <= 3.0e38)) {
    WEFT_THROW(r.op() << ": attribute 'max_scale': expected a finite float32 > 0, found "
                      << p.max_scale);
  }
  return p;
}

std::vector<Shape> LossScaleShape(const Attrs&, const std::vector<Shape>& in) {
  static const char* const kNames[] = {"sumsq", "scale", "clean_steps"};
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].Size() != 1) {
      WEFT_THROW("expected '" << kNames[i] << "' (input " << i << ") to have one element, found "
                              << in[i]);
    }
  }
  return {Shape{1}};
}

std::vector<DType> LossScaleType(const Attrs&, const std::vector<DType>& in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != DType::kFloat32) {
      WEFT_THROW("op 'amp_update_scale': expected float32 inputs, found " << in[i] << " for input "
                                                                          << i);
    }
  }
  return {DType::kFloat32};
}

const bool defined = [] {
  RegisterOp("amp_update_scale")
      .Describe(
          "the dynamic loss scaler's step: from the gradients' sum of squares, grows or backs "
          "off the scale (updated in place with its count of clean steps); returns 1 / the "
          "step's scale, or NaN when it overflowed")
      .Params(ParseLossScale)
      .Inputs({"sumsq", "scale", "clean_steps"})
      .InferShape(LossScaleShape)
      .InferType(LossScaleType)
      .MutateInputs({1, 2});
  return true;
}();

}  // namespace
}  // namespace weft
