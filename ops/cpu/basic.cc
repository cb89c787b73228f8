// CPU compute of the small utility ops (ops/tensor/basic.cc defines them and says what they
// compute): zeros_like and ones_like fill, _copy and stop_gradient copy (nothing to do in place),
// on every dtype (bfloat16 too).
#include "core/bfloat16.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

template <int kValue>
void FillCompute(const OpContext&, const Attrs&, std::span<const TensorView>,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull || (req[0] == OpReq::kAddTo && kValue == 0)) return;
  if (out[0].dtype() == DType::kBFloat16) {
    auto* y = static_cast<BFloat16*>(out[0].raw());
    ParallelFor(out[0].size(), 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float base = req[0] == OpReq::kAddTo ? y[i].ToFloat() : 0.0f;
        y[i] = BFloat16::FromFloat(base + static_cast<float>(kValue));
      }
    });
    return;
  }
  WEFT_DTYPE_SWITCH(out[0].dtype(), T, "fill", {
    T* y = out[0].data<T>();
    ParallelFor(out[0].size(), 1 << 14, [&](int64_t b, int64_t e) {
      StoreRange(y, req[0], b, e, [](int64_t) { return static_cast<T>(kValue); });
    });
  });
}

void CopyCompute(const OpContext&, const Attrs&, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  WEFT_MOVE_SWITCH(out[0].dtype(), T, "_copy", {
    const T* x = in[0].data<T>();
    T* y = out[0].data<T>();
    if (req[0] != OpReq::kAddTo && x == y) return;  // in place
    ParallelFor(out[0].size(), 1 << 14, [&](int64_t b, int64_t e) {
      StoreRange(y, req[0], b, e, [x](int64_t i) { return x[i]; });
    });
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"zeros_like", {.compute = FillCompute<0>}},
                                                 {"ones_like", {.compute = FillCompute<1>}},
                                                 {"_copy", {.compute = CopyCompute}},
                                                 {"stop_gradient", {.compute = CopyCompute}},
                                             });

}  // namespace
}  // namespace weft::cpu
