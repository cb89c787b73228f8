// GPU compute of write_at (ops/tensor/write_at.cc): data and value of any dtype the kernels have a
// type for, the index of float32, float64, int32 or int64. A bad index fails the op with the CPU's
// message, raised at the next wait on its output; the kernel notes it on the device and nothing
// waits for it (internal/bad_input.h, as take does).
#include <sstream>
#include <string>

#include "core/error.h"
#include "ops/gpu/internal/bad_input.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft::gpu {
namespace {

constexpr DType kIndexTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64};

// in: (data, value, index); out: data, updated (the same memory when bound in a graph).
void WriteAtCompute(const OpContext& ctx, const Attrs& attrs, std::span<const TensorView> in,
                    std::span<const OpReq> req, std::span<const TensorView> out) {
  const std::string t = KernelType("write_at", kFillTypes, in.first(2), {});
  const std::string i = KernelType("write_at (index)", kIndexTypes, in.subspan(2, 1), {});
  const WriteAtParam& p = attrs.Get<WriteAtParam>();
  const int axis = p.axis < 0 ? p.axis + in[0].shape().ndim() : p.axis;
  const TakeLayout l = MakeTakeLayout(p, in[0].shape(), in[1].shape()[axis], "write_at");
  const BadItems bad(ctx, [l](int64_t, double value) {
    return internal::FormatError(
        __FILE__, __LINE__,
        (std::ostringstream() << "write_at: index " << value
                              << " is out of range: expected 0 <= index <= " << l.n - l.k
                              << " (a slab of " << l.k << " along an axis of " << l.n << ")")
            .str());
  });
  Launch(ctx, "write_at.cuh", Instance("weft::WriteAt", {t, i}), l.outer * l.k * l.inner,
         in[1].raw(), in[2].raw(), in[0].raw(), l.outer, l.n, l.k, l.inner, bad.slot());
  bad.Report(in[2]);
  if (req[0] == OpReq::kAddTo || (Writes(req[0]) && out[0].raw() != in[0].raw()))
    CopyGpu(ctx, in[0], req[0], out[0]);
}

constexpr char kChecksIndex[] = "checks its index on the device (a report per call)";
WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu,
                           {{"write_at",
                             {.compute = WriteAtCompute, .capture_barrier = kChecksIndex}}});

}  // namespace
}  // namespace weft::gpu
