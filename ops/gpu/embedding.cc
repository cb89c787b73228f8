// GPU compute of Embedding and _backward_Embedding (ops/nn/embedding.cc) on float32 and
// float64. One difference from the CPU, which fails the op on an index outside [0, input_dim):
// the GPU cannot without waiting for itself, so such an index (or NaN) gives a row of zeros
// (nothing added for kAddTo) and no gradient (kernels/embedding.cuh).
#include <string>

#include "ops/gpu/internal/launch.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// in: (data: indices, any shape; weight: (input_dim, dim)); out: data.shape + (dim,).
void EmbeddingCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                      std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("Embedding", kFloatTypes, in, out);
  const TensorView &data = in[0], &weight = in[1];
  const int64_t n = data.size(), dim = weight.shape()[1];
  int v = PackWidth(weight.dtype(), {weight.raw(), out[0].raw()});
  v = dim % v == 0 ? v : 1;
  Launch(ctx, "embedding.cuh", Instance("weft::EmbeddingForward", {t, std::to_string(v)}), Packs(n * dim, v),
         data.raw(), weight.raw(), out[0].raw(), n, dim, a.Get<EmbeddingParam>().input_dim, ReqCode(req[0]));
}

// in: (out_grad: data.shape + (dim,), data); out: d weight, (input_dim, dim).
void EmbeddingBackwardCompute(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                              std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("_backward_Embedding", kFloatTypes, in, out);
  const TensorView &dy = in[0], &data = in[1], &dw = out[0];
  if (req[0] != OpReq::kAddTo) FillGpu(ctx, 0, OpReq::kWrite, dw);
  const int64_t n = data.size(), dim = dw.shape()[1];
  Launch(ctx, "embedding.cuh", Instance("weft::EmbeddingBackward", {t}), n * dim, dy.raw(), data.raw(), dw.raw(), n,
         dim, a.Get<EmbeddingParam>().input_dim);
}

WEFT_REGISTER_COMPUTE(Embedding, DeviceType::kGpu, EmbeddingCompute);
WEFT_REGISTER_COMPUTE(_backward_Embedding, DeviceType::kGpu, EmbeddingBackwardCompute);

}  // namespace
}  // namespace weft::gpu
