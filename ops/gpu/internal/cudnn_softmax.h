// softmax and log_softmax along one axis through cuDNN, for softmax.cc and
// softmax_cross_entropy.cc. A tensor is seen as (outer, n, inner), softmax taken over the n
// values of each row, `inner` apart: cuDNN's NCHW (outer, n, inner, 1) in
// CUDNN_SOFTMAX_MODE_CHANNEL. Rows subtract their max before exp (CUDNN_SOFTMAX_ACCURATE;
// CUDNN_SOFTMAX_LOG for log_softmax).
//
//   const SoftmaxRows rows = SoftmaxRowsOf(x.shape(), axis);
//   SoftmaxForward(call, DType::kFloat32, rows, /*log=*/false, x.raw(), req, y.raw());
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/shape.h"
#include "ops/gpu/internal/gpu_call.h"

namespace weft::gpu {

struct SoftmaxRows {
  int64_t outer, n, inner;
};

// `axis` in [0, ndim).
SoftmaxRows SoftmaxRowsOf(const Shape& s, int axis);

// y = softmax(x) (log: log_softmax(x)), written or added as `req` says. y must not alias x.
void SoftmaxForward(const GpuCall& call, DType dtype, const SoftmaxRows& rows, bool log,
                    const void* x, OpReq req, void* y);

// dx from dy and the forward output y: y * (dy - sum(dy * y)), or for log_softmax
// dy - exp(y) * sum(dy); written or added as `req` says. dx must not alias dy or y.
void SoftmaxBackward(const GpuCall& call, DType dtype, const SoftmaxRows& rows, bool log,
                     const void* dy, const void* y, OpReq req, void* dx);

}  // namespace weft::gpu
