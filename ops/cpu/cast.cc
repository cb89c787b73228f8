// CPU compute of Cast and _backward_Cast (ops/tensor/cast.cc defines them and says what they
// compute): one conversion, from the input's dtype to the output's, for both.
#include "ops/cpu/internal/cast.h"

#include "core/bfloat16.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// Loads and stores as double, through BFloat16 for bf16 (exact for every dtype listed).
template <typename T>
double Load(const T* p, int64_t i) {
  return static_cast<double>(p[i]);
}
template <>
double Load(const BFloat16* p, int64_t i) {
  return p[i].ToFloat();
}
template <typename T>
T Convert(double v) {
  return static_cast<T>(v);
}
template <>
BFloat16 Convert(double v) {
  return BFloat16::FromFloat(static_cast<float>(v));
}

// bool (an input only: Cast has no bool output) is read as its bytes, 0 and 1.
#define WEFT_CAST_SWITCH(dtype, T, ...)               \
  if ((dtype) == DType::kBFloat16) {                  \
    using T = BFloat16;                               \
    __VA_ARGS__;                                      \
  } else if ((dtype) == DType::kBool) {               \
    using T = uint8_t;                                \
    __VA_ARGS__;                                      \
  } else {                                            \
    WEFT_DTYPE_SWITCH(dtype, T, "Cast", __VA_ARGS__); \
  }

}  // namespace

// out = cast(in), or out += cast(in) (through double: a bf16 sum rounds once).
void CastTensor(const TensorView& in, OpReq req, const TensorView& out) {
  if (req == OpReq::kNull) return;
  // float32 <-> bfloat16, written (a mixed-precision step's casts): the vectorized loops.
  const DType from = in.dtype(), to = out.dtype();
  if (req != OpReq::kAddTo && from == DType::kFloat32 && to == DType::kBFloat16) {
    const float* x = in.data<float>();
    BFloat16* y = out.data<BFloat16>();
    return ParallelFor(out.size(), 1 << 14,
                       [&](int64_t b, int64_t e) { NarrowBf16(x + b, req, y + b, e - b); });
  }
  if (req != OpReq::kAddTo && from == DType::kBFloat16 && to == DType::kFloat32) {
    const BFloat16* x = in.data<BFloat16>();
    float* y = out.data<float>();
    return ParallelFor(out.size(), 1 << 14,
                       [&](int64_t b, int64_t e) { WidenBf16(x + b, y + b, e - b); });
  }
  WEFT_CAST_SWITCH(in.dtype(), X, {
    WEFT_CAST_SWITCH(out.dtype(), Y, {
      const X* x = static_cast<const X*>(in.raw());
      Y* y = static_cast<Y*>(out.raw());
      const bool add = req == OpReq::kAddTo;
      ParallelFor(out.size(), 1 << 14, [&](int64_t b, int64_t e) {
        // Not x + (add ? y : 0): -0 + 0 is +0, and a cast must keep the sign of zero.
        for (int64_t i = b; i < e; ++i)
          y[i] = Convert<Y>(add ? Load(x, i) + Load(y, i) : Load(x, i));
      });
    });
  });
}

namespace {

void CastCompute(const OpContext&, const Attrs&, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  CastTensor(in[0], req[0], out[0]);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"Cast", {.compute = CastCompute}},
                                                 {"_backward_Cast", {.compute = CastCompute}},
                                             });

}  // namespace
}  // namespace weft::cpu
