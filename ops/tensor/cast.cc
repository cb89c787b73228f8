// Cast: the input (any of these dtypes, or bool: 0 and 1) converted to another dtype (float32,
// float64, bfloat16, int32, int64, uint8), rounding to nearest (even) into bfloat16 and truncating
// toward zero into integers. Its gradient is the output gradient cast back to the input's dtype
// (_backward_Cast reads the input for it). Mixed precision casts bf16 activations to float32 before
// a loss, and back. Compute: ops/cpu/cast.cc, ops/gpu/cast.cc.
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft {
namespace {

CastParam ParseCast(AttrReader& r) {
  return {r.Choice<DType>("dtype",
                          {{"float32", DType::kFloat32},
                           {"float64", DType::kFloat64},
                           {"bfloat16", DType::kBFloat16},
                           {"float16", DType::kFloat16},
                           {"int32", DType::kInt32},
                           {"int64", DType::kInt64},
                           {"uint8", DType::kUInt8}},
                          std::nullopt)};
}

std::vector<Shape> FirstShape(const Attrs&, const std::vector<Shape>& in) { return {in[0]}; }

const bool defined = [] {
  WEFT_REGISTER_OP(Cast)
      .Describe("the input converted to `dtype` (bf16 rounds to nearest even; integers truncate)")
      .Params(ParseCast)
      .Inputs({"data"})
      .InferShape(FirstShape)
      .Pointwise(PointwiseKind::kCast)
      .InferType([](const Attrs& a, const std::vector<DType>&) {
        return std::vector<DType>{a.Get<CastParam>().dtype};
      })
      .Gradient([](const Attrs&, GradBuilder& g) {
        g.SetInputGrad(0, g.Op("_backward_Cast", {g.OutGrad(0), g.Input(0)}));
      });
  WEFT_REGISTER_OP(_backward_Cast)
      .Describe(
          "Cast's gradient: out_grad converted to the dtype of data (read for its dtype only)")
      .Inputs({"out_grad", "data"})
      .InferShape(FirstShape)
      .Pointwise(PointwiseKind::kCast)
      .InferType(
          [](const Attrs&, const std::vector<DType>& in) { return std::vector<DType>{in[1]}; });
  return true;
}();

}  // namespace
}  // namespace weft
