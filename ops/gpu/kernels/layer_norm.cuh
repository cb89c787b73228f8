// LayerNorm's kernels (ops/gpu/layer_norm.cc): one forward and one backward (whose per-block
// parameter gradients the reduction kernels sum). Data of type T (float or weft::bf16) is seen as
// (outer, c, inner): row r = (o, i) holds c values from (o * c) * inner + i, `inner` apart. A block
// handles a row at a time (rows grid-strided over the blocks), its threads strided over the row's
// values, the row's sums reduced by BlockSum. gamma, beta, mean, rstd and the parameter gradients
// are float; all arithmetic is float.
#pragma once

#include "common.cuh"

namespace weft {

// The offset of row r's first value.
__device__ inline int64 LnRowStart(int64 r, int64 c, int64 inner) {
  return (r / inner) * c * inner + r % inner;
}

// Each row's mean and rstd = 1 / sqrt(var + eps) (biased variance, two passes), stored as
// req_mean and req_rstd say, and y = (x - mean) * rstd * gamma + beta as req_y says.
template <typename T>
__global__ void LnForward(const T* x, const float* gamma, const float* beta, T* y, float* mean,
                          float* rstd, int64 rows, int64 c, int64 inner, float eps, int req_y,
                          int req_mean, int req_rstd) {
  __shared__ float partial[kGpuBlock];
  for (int64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64 start = LnRowStart(r, c, inner);
    const T* row = x + start;
    float sum = 0;
    for (int64 j = threadIdx.x; j < c; j += kGpuBlock) sum += ToArith(row[j * inner]);
    const float m = BlockSum(sum, partial) / static_cast<float>(c);
    __syncthreads();
    float squares = 0;
    for (int64 j = threadIdx.x; j < c; j += kGpuBlock) {
      const float d = ToArith(row[j * inner]) - m;
      squares += d * d;
    }
    const float rs = 1.0f / Sqrt(BlockSum(squares, partial) / static_cast<float>(c) + eps);
    __syncthreads();
    for (int64 j = threadIdx.x; j < c; j += kGpuBlock)
      Store1(y + start + j * inner, (ToArith(row[j * inner]) - m) * rs * gamma[j] + beta[j], req_y);
    if (threadIdx.x == 0) {
      Store1(mean + r, m, req_mean);
      Store1(rstd + r, rs, req_rstd);
    }
  }
}

// Each row's d_data = rstd * (g - mean(g) - x_hat * mean(g * x_hat)), g = dy * gamma and
// x_hat = (x - mean) * rstd, as req_dx says; and, when partial_gamma is not null, this block's
// sums over its rows of dy * x_hat and dy for each j, at partial_gamma[blockIdx.x * c + j] and
// partial_beta[blockIdx.x * c + j] (each thread owns the j it visits: no race).
template <typename T>
__global__ void LnBackward(const T* dy, const T* x, const float* gamma, const float* mean,
                           const float* rstd, T* dx, float* partial_gamma, float* partial_beta,
                           int64 rows, int64 c, int64 inner, int req_dx) {
  __shared__ float partial[kGpuBlock];
  float* pg = partial_gamma ? partial_gamma + blockIdx.x * c : nullptr;
  float* pb = partial_beta ? partial_beta + blockIdx.x * c : nullptr;
  for (int64 j = threadIdx.x; pg && j < c; j += kGpuBlock) pg[j] = pb[j] = 0;
  for (int64 r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64 start = LnRowStart(r, c, inner);
    const float m = mean[r], rs = rstd[r];
    float sum_g = 0, sum_g_x_hat = 0;
    for (int64 j = threadIdx.x; j < c; j += kGpuBlock) {
      const float d = ToArith(dy[start + j * inner]);
      const float x_hat = (ToArith(x[start + j * inner]) - m) * rs;
      sum_g += d * gamma[j];
      sum_g_x_hat += d * gamma[j] * x_hat;
      if (pg) pg[j] += d * x_hat, pb[j] += d;
    }
    const float a = BlockSum(sum_g, partial) / static_cast<float>(c);
    __syncthreads();
    const float b = BlockSum(sum_g_x_hat, partial) / static_cast<float>(c);
    __syncthreads();
    for (int64 j = threadIdx.x; req_dx != kReqNull && j < c; j += kGpuBlock) {
      const float x_hat = (ToArith(x[start + j * inner]) - m) * rs;
      const float g = ToArith(dy[start + j * inner]) * gamma[j];
      Store1(dx + start + j * inner, rs * (g - a - x_hat * b), req_dx);
    }
  }
}

}  // namespace weft
