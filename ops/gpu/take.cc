// GPU compute of take and _backward_take (ops/tensor/take.cc): a of float32, float64, bfloat16 or
// float16 (a 16-bit gradient summed in float32 and rounded once: internal/scatter_sum.h), indices
// of float32, float64, int32 or int64. An index outside [0, a.shape[axis]) (or NaN) fails the op
// with the CPU's message (the first such position, its index, the bound), raised at the next wait
// on the op's outputs; the kernels note it on the device and nothing waits for it
// (internal/bad_input.h, as Embedding does).
#include <sstream>
#include <string>

#include "core/error.h"
#include "ops/gpu/internal/bad_input.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/scatter_sum.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::gpu {
namespace {

constexpr DType kIndexTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};

// A check of `indices` against [0, n), with ops/cpu/take.cc's message.
BadItems IndexCheck(const OpContext& ctx, const char* op, const TensorView& indices, int64_t n) {
  const bool integer = indices.dtype() == DType::kInt32 || indices.dtype() == DType::kInt64;
  return BadItems(ctx, [op, n, integer](int64_t position, double value) {
    std::ostringstream index;
    if (integer) {
      index << static_cast<int64_t>(value);
    } else {
      index << value;
    }
    return internal::FormatError(
        __FILE__, __LINE__,
        (std::ostringstream() << op << ": index " << index.str() << " at position " << position
                              << " of indices is out of range: expected 0 <= index < " << n
                              << " (the extent of a's axis)")
            .str());
  });
}

// in: (a, indices); out: a.shape[:axis] + indices.shape + a.shape[axis+1:].
void TakeCompute(const OpContext& ctx, const Attrs& attrs, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  const std::string t = KernelType("take", kElementwiseTypes, in.first(1), out);
  const std::string i = KernelType("take (indices)", kIndexTypes, in.subspan(1, 1), {});
  const TakeLayout l = MakeTakeLayout(attrs.Get<TakeParam>(), in[0].shape(), in[1].size());
  const BadItems bad = IndexCheck(ctx, "take", in[1], l.n);
  Launch(ctx, "take.cuh", Instance("weft::TakeForward", {t, i}), l.outer * l.k * l.inner,
         in[0].raw(), in[1].raw(), out[0].raw(), l.outer, l.n, l.k, l.inner, ReqCode(req[0]),
         bad.slot());
  bad.Report(in[1]);
}

// in: (out_grad, indices, a: read for its shape); out: d a.
void TakeBackwardCompute(const OpContext& ctx, const Attrs& attrs, std::span<const TensorView> in,
                         std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("_backward_take", kElementwiseTypes, in.first(1), out);
  const std::string i = KernelType("_backward_take (indices)", kIndexTypes, in.subspan(1, 1), {});
  const TakeLayout l = MakeTakeLayout(attrs.Get<TakeParam>(), in[2].shape(), in[1].size());
  const ScatterSum sum(ctx, out[0], req[0]);
  const BadItems bad = IndexCheck(ctx, "_backward_take", in[1], l.n);
  Launch(ctx, "take.cuh", Instance("weft::TakeBackward", {t, i}), l.outer * l.k * l.inner,
         in[0].raw(), in[1].raw(), sum.target(), l.outer, l.n, l.k, l.inner, bad.slot());
  sum.Finish();
  bad.Report(in[1]);
}

constexpr char kChecksIndices[] = "checks its indices on the device (a report per call)";
WEFT_REGISTER_DEVICE_IMPLS(
    DeviceType::kGpu,
    {
        {"take", {.compute = TakeCompute, .capture_barrier = kChecksIndices}},
        {"_backward_take", {.compute = TakeBackwardCompute, .capture_barrier = kChecksIndices}},
    });

}  // namespace
}  // namespace weft::gpu
