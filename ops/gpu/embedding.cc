// GPU compute of Embedding and _backward_Embedding (ops/nn/embedding.cc): weights of float32,
// float64, bfloat16 or float16, indices of float32, float64, bfloat16, int32 or int64. A 16-bit
// gradient is summed in a float32 workspace and stored once (internal/scatter_sum.h).
// An index outside [0, input_dim) (or NaN) fails the op with the CPU's message (the first such
// position, its index, the bound), raised at the next wait on the op's outputs; the kernel notes
// it on the device and nothing waits for it (internal/bad_input.h). Meanwhile such an index gives
// a row of zeros (nothing added for kAddTo) and no gradient (kernels/embedding.cuh).
#include <sstream>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/gpu/internal/bad_input.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/gpu/internal/scatter_sum.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// A check of the indices in `data` against [0, input_dim), raising what ops/cpu/embedding.cc
// throws for the index `value` at `position` of data (printed as a double, as the CPU prints it).
BadItems IndexCheck(const OpContext& ctx, const char* op, int input_dim) {
  return BadItems(ctx, [op, input_dim](int64_t position, double value) {
    return internal::FormatError(
        __FILE__, __LINE__,
        (std::ostringstream() << op << ": index " << value << " at position " << position
                              << " of data is out of range: expected "
                              << "0 <= index < " << input_dim << " (input_dim)")
            .str());
  });
}

// The kernels' names of the weight's type T (out: the output or gradient) and the index's I.
std::pair<std::string, std::string> Types(const char* op, const TensorView& out,
                                          const TensorView& data) {
  return {KernelType(op, kElementwiseTypes, {}, {&out, 1}),
          KernelType(op, kEmbeddingIndexTypes, {&data, 1}, {})};
}

// in: (data: indices, any shape; weight: (input_dim, dim)); out: data.shape + (dim,).
void EmbeddingCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const TensorView &data = in[0], &weight = in[1];
  const auto [t, index] = Types("Embedding", out[0], data);
  const int64_t n = data.size(), dim = weight.shape()[1];
  const int input_dim = a.Get<EmbeddingParam>().input_dim;
  int v = PackWidth(weight.dtype(), {weight.raw(), out[0].raw()});
  v = dim % v == 0 ? v : 1;
  const BadItems bad = IndexCheck(ctx, "Embedding", input_dim);
  Launch(ctx, "embedding.cuh", Instance("weft::EmbeddingForward", {t, index, std::to_string(v)}),
         Packs(n * dim, v), data.raw(), weight.raw(), out[0].raw(), n, dim, input_dim,
         ReqCode(req[0]), bad.slot());
  bad.Report(data);
}

// in: (out_grad: data.shape + (dim,), data); out: d weight, (input_dim, dim).
void EmbeddingBackwardCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                              std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const TensorView &dy = in[0], &data = in[1], &dw = out[0];
  const auto [t, index] = Types("_backward_Embedding", dw, data);
  const int64_t n = data.size(), dim = dw.shape()[1];
  const int input_dim = a.Get<EmbeddingParam>().input_dim;
  const ScatterSum sum(ctx, dw, req[0]);
  const BadItems bad = IndexCheck(ctx, "_backward_Embedding", input_dim);
  Launch(ctx, "embedding.cuh", Instance("weft::EmbeddingBackward", {t, index}), n * dim, dy.raw(),
         data.raw(), sum.target(), n, dim, input_dim, bad.slot());
  sum.Finish();
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
