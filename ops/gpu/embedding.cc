// GPU compute of Embedding and _backward_Embedding (ops/nn/embedding.cc) on float32 and float64.
// An index outside [0, input_dim) (or NaN) fails the op with the CPU's message (the first such
// position, its index, the bound), raised at the next wait on the op's outputs; the kernel notes
// it on the device and nothing waits for it (internal/bad_input.h). Meanwhile such an index gives
// a row of zeros (nothing added for kAddTo) and no gradient (kernels/embedding.cuh).
#include <sstream>
#include <string>

#include "core/error.h"
#include "ops/gpu/internal/bad_input.h"
#include "ops/gpu/internal/launch.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// What ops/cpu/embedding.cc throws for the index `value` at `position` of data, printed as a T.
template <typename T>
DeviceErrorMessage BadIndex(const char* op, int input_dim) {
  return [op, input_dim](int64_t position, double value) {
    return internal::FormatError(
        __FILE__, __LINE__,
        (std::ostringstream() << op << ": index " << static_cast<T>(value) << " at position "
                              << position << " of data is out of range: expected "
                              << "0 <= index < " << input_dim << " (input_dim)")
            .str());
  };
}

// A check of the indices in `data` against [0, input_dim).
BadItems IndexCheck(const OpContext& ctx, const char* op, const TensorView& data, int input_dim) {
  return BadItems(ctx, data.dtype() == DType::kFloat32 ? BadIndex<float>(op, input_dim)
                                                       : BadIndex<double>(op, input_dim));
}

// in: (data: indices, any shape; weight: (input_dim, dim)); out: data.shape + (dim,).
void EmbeddingCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("Embedding", kFloatTypes, in, out);
  const TensorView &data = in[0], &weight = in[1];
  const int64_t n = data.size(), dim = weight.shape()[1];
  const int input_dim = a.Get<EmbeddingParam>().input_dim;
  int v = PackWidth(weight.dtype(), {weight.raw(), out[0].raw()});
  v = dim % v == 0 ? v : 1;
  const BadItems bad = IndexCheck(ctx, "Embedding", data, input_dim);
  Launch(ctx, "embedding.cuh", Instance("weft::EmbeddingForward", {t, std::to_string(v)}),
         Packs(n * dim, v), data.raw(), weight.raw(), out[0].raw(), n, dim, input_dim,
         ReqCode(req[0]), bad.slot());
  bad.Report(data);
}

// in: (out_grad: data.shape + (dim,), data); out: d weight, (input_dim, dim).
void EmbeddingBackwardCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                              std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("_backward_Embedding", kFloatTypes, in, out);
  const TensorView &dy = in[0], &data = in[1], &dw = out[0];
  if (req[0] != OpReq::kAddTo) FillGpu(ctx, 0, OpReq::kWrite, dw);
  const int64_t n = data.size(), dim = dw.shape()[1];
  const int input_dim = a.Get<EmbeddingParam>().input_dim;
  const BadItems bad = IndexCheck(ctx, "_backward_Embedding", data, input_dim);
  Launch(ctx, "embedding.cuh", Instance("weft::EmbeddingBackward", {t}), n * dim, dy.raw(),
         data.raw(), dw.raw(), n, dim, input_dim, bad.slot());
  bad.Report(data);
}

constexpr char kChecksIndices[] = "checks its indices on the device (a report per call)";
WEFT_REGISTER_DEVICE_IMPLS(
    DeviceType::kGpu,
    {
        {"Embedding", {.compute = EmbeddingCompute, .capture_barrier = kChecksIndices}},
        {"_backward_Embedding",
         {.compute = EmbeddingBackwardCompute, .capture_barrier = kChecksIndices}},
    });

}  // namespace
}  // namespace weft::gpu
