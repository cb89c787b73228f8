// GPU compute of Cast and _backward_Cast (ops/tensor/cast.cc) between float32, float64, bfloat16,
// int32, int64 and uint8 (and from bool), converting as the CPU does (kernels/cast.cuh). Cast's
// gradient is the output gradient cast back to the input's dtype: the same conversion.
#include <cstdint>
#include <functional>
#include <string>

#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// y = cast(x) (same size) as `req` says.
void CastGpu(const OpContext& ctx, const std::string& op, const TensorView& x, OpReq req,
             const TensorView& y) {
  if (req == OpReq::kNull) return;
  // bool (an input only) is read as its bytes, 0 and 1
  const std::string from = x.dtype() == DType::kBool ? TypeName(DType::kUInt8)
                                                     : KernelType(op, kFillTypes, {&x, 1}, {}),
                    to = KernelType(op, kFillTypes, {}, {&y, 1});
  if (x.dtype() == y.dtype() && req != OpReq::kAddTo) return CopyGpu(ctx, x, req, y);
  const auto aligned = [](const TensorView& t) {
    return reinterpret_cast<uintptr_t>(t.raw()) % (4 * DTypeSize(t.dtype())) == 0;
  };
  const int v = aligned(x) && aligned(y) ? 4 : 1;
  const int64_t n = y.size();
  Launch(ctx, "cast.cuh", Instance("weft::Cast", {from, to, std::to_string(v)}), Packs(n, v),
         x.raw(), y.raw(), n, ReqCode(req));
}

// Cast: in (data), out (data in `dtype`). _backward_Cast: in (out_grad, data), out (out_grad in
// data's dtype).
void CastCompute(const std::string& op, const OpContext& ctx, const Attrs&,
                 std::span<const TensorView> in, std::span<const OpReq> req,
                 std::span<const TensorView> out) {
  CastGpu(ctx, op, in[0], req[0], out[0]);
}

WEFT_REGISTER_DEVICE_IMPLS(
    DeviceType::kGpu,
    {
        {"Cast", {.compute = std::bind_front(CastCompute, std::string("Cast"))}},
        {"_backward_Cast",
         {.compute = std::bind_front(CastCompute, std::string("_backward_Cast"))}},
    });

}  // namespace
}  // namespace weft::gpu
