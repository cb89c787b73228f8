#include "ops/gpu/internal/cudnn_softmax.h"

#include "ops/gpu/internal/cudnn_desc.h"

namespace weft::gpu {

namespace {

TensorDesc RowsDesc(DType dtype, const SoftmaxRows& r) {
  return ImageDesc("softmax", dtype, Shape{r.outer, r.n, r.inner, 1});
}

cudnnSoftmaxAlgorithm_t AlgorithmOf(bool log) {
  return log ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
}

}  // namespace

SoftmaxRows SoftmaxRowsOf(const Shape& s, int axis) {
  SoftmaxRows r{1, s[axis], 1};
  for (int i = 0; i < axis; ++i) r.outer *= s[i];
  for (int i = axis + 1; i < s.ndim(); ++i) r.inner *= s[i];
  return r;
}

void SoftmaxForward(const GpuCall& call, DType dtype, const SoftmaxRows& rows, bool log,
                    const void* x, OpReq req, void* y) {
  const TensorDesc desc = RowsDesc(dtype, rows);
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnSoftmaxForward(h, AlgorithmOf(log), CUDNN_SOFTMAX_MODE_CHANNEL, One(dtype).get(),
                               desc.get(), x, BetaFor(req, dtype).get(), desc.get(), y);
  }));
}

void SoftmaxBackward(const GpuCall& call, DType dtype, const SoftmaxRows& rows, bool log,
                     const void* dy, const void* y, OpReq req, void* dx) {
  const TensorDesc desc = RowsDesc(dtype, rows);
  WEFT_CUDNN_CHECK(call.Cudnn([&](cudnnHandle_t h) {
    return cudnnSoftmaxBackward(h, AlgorithmOf(log), CUDNN_SOFTMAX_MODE_CHANNEL, One(dtype).get(),
                                desc.get(), y, desc.get(), dy, BetaFor(req, dtype).get(),
                                desc.get(), dx);
  }));
}

}  // namespace weft::gpu
