// Cast: the input converted to another dtype (float32, float64, bfloat16, int32, int64, uint8),
// rounding to nearest (even) into bfloat16 and truncating toward zero into integers. Its gradient
// is the output gradient cast back to the input's dtype (_backward_Cast reads the input for it).
// Mixed precision casts bf16 activations to float32 before a loss, and back.
#include "core/bfloat16.h"
#include "ops/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

struct CastParam {
  DType dtype;
};

CastParam ParseCast(AttrReader& r) {
  return {r.Choice<DType>("dtype",
                          {{"float32", DType::kFloat32},
                           {"float64", DType::kFloat64},
                           {"bfloat16", DType::kBFloat16},
                           {"int32", DType::kInt32},
                           {"int64", DType::kInt64},
                           {"uint8", DType::kUInt8}},
                          std::nullopt)};
}

// Loads and stores as double, through BFloat16 for bf16 (exact for every dtype listed).
template <typename T>
double Load(const T* p, int64_t i) { return static_cast<double>(p[i]); }
template <>
double Load(const BFloat16* p, int64_t i) { return p[i].ToFloat(); }
template <typename T>
T Convert(double v) { return static_cast<T>(v); }
template <>
BFloat16 Convert(double v) { return BFloat16::FromFloat(static_cast<float>(v)); }

#define WEFT_CAST_SWITCH(dtype, T, ...)                                                      \
  if ((dtype) == DType::kBFloat16) {                                                          \
    using T = BFloat16;                                                                       \
    __VA_ARGS__;                                                                              \
  } else {                                                                                    \
    WEFT_DTYPE_SWITCH(dtype, T, "Cast", __VA_ARGS__);                                         \
  }

// out = cast(in), or out += cast(in) (through double: a bf16 sum rounds once).
void CastTensor(const TensorView& in, OpReq req, const TensorView& out) {
  if (req == OpReq::kNull) return;
  WEFT_CAST_SWITCH(in.dtype(), X, {
    WEFT_CAST_SWITCH(out.dtype(), Y, {
      const X* x = static_cast<const X*>(in.raw());
      Y* y = static_cast<Y*>(out.raw());
      const bool add = req == OpReq::kAddTo;
      ParallelFor(out.size(), 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) y[i] = Convert<Y>(Load(x, i) + (add ? Load(y, i) : 0.0));
      });
    });
  });
}

void CastCompute(const OpContext&, const Attrs&, std::span<const TensorView> in, std::span<const OpReq> req,
                 std::span<const TensorView> out) {
  CastTensor(in[0], req[0], out[0]);
}

std::vector<Shape> FirstShape(const Attrs&, const std::vector<Shape>& in) { return {in[0]}; }

const bool registered = [] {
  WEFT_REGISTER_OP(Cast)
      .Describe("the input converted to `dtype` (bf16 rounds to nearest even; integers truncate)")
      .Params(ParseCast)
      .Inputs({"data"})
      .InferShape(FirstShape)
      .InferType([](const Attrs& a, const std::vector<DType>&) { return std::vector<DType>{a.Get<CastParam>().dtype}; })
      .Compute(DeviceType::kCpu, CastCompute)
      .Gradient([](const Attrs&, GradBuilder& g) {
        g.SetInputGrad(0, g.Op("_backward_Cast", {g.OutGrad(0), g.Input(0)}));
      });
  WEFT_REGISTER_OP(_backward_Cast)
      .Describe("Cast's gradient: out_grad converted to the dtype of data (read for its dtype only)")
      .Inputs({"out_grad", "data"})
      .InferShape(FirstShape)
      .InferType([](const Attrs&, const std::vector<DType>& in) { return std::vector<DType>{in[1]}; })
      .Compute(DeviceType::kCpu, CastCompute);
  return true;
}();

}  // namespace
}  // namespace weft::cpu
