// LayerNorm's kernels (ops/gpu/layer_norm.cc): a forward and a backward in two forms, and the
// backward's last step, LnParamGradSum, which adds up the blocks' partial parameter gradients. Data
// of type T (float or weft::bf16) is seen as (outer, c, inner): row r = (o, i) holds c values from
// (o * c) * inner + i, `inner` apart. In general a block handles a row at a time (rows grid-strided
// over the blocks), its threads strided over the row's values, the row's sums reduced by BlockSum.
// Where the rows are contiguous (inner 1), whole 16-byte packs and at most kGpuLnWarpMaxC long (a
// transformer's), a warp handles a row instead, held in its registers, its sums reduced by shuffles
// (LnForwardWarp, LnBackwardWarp): one read of the data and no barrier per row. gamma, beta, mean,
// rstd and the parameter gradients are float; all arithmetic is float. The output y and the
// backward's dy are of type U: T, or a 16-bit type for float data (LayerNorm's out_dtype: y rounded
// once).
#pragma once

#include "common.cuh"

namespace weft {

// The offset of row r's first value.
__device__ inline int64 LnRowStart(int64 r, int64 c, int64 inner) {
  return (r / inner) * c * inner + r % inner;
}

// Each row's mean and rstd = 1 / sqrt(var + eps) (biased variance, two passes), stored as
// req_mean and req_rstd say, and y = (x - mean) * rstd * gamma + beta as req_y says.
template <typename T, typename U>
__global__ void LnForward(const T* x, const float* gamma, const float* beta, U* y, float* mean,
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
// x_hat = (x - mean) * rstd, as req_dx says; and, when `partial` is not null, this block's sums
// over its rows of dy * x_hat and dy for each j, at partial[blockIdx.x * 2c + j] and
// partial[blockIdx.x * 2c + c + j] (each thread owns the j it visits: no race), which
// LnParamGradSum adds up.
template <typename T, typename U>
__global__ void LnBackward(const U* dy, const T* x, const float* gamma, const float* mean,
                           const float* rstd, T* dx, float* partial, int64 rows, int64 c,
                           int64 inner, int req_dx) {
  __shared__ float block_sums[kGpuBlock];
  float* pg = partial ? partial + blockIdx.x * 2 * c : nullptr;
  float* pb = partial ? pg + c : nullptr;
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
    const float a = BlockSum(sum_g, block_sums) / static_cast<float>(c);
    __syncthreads();
    const float b = BlockSum(sum_g_x_hat, block_sums) / static_cast<float>(c);
    __syncthreads();
    for (int64 j = threadIdx.x; req_dx != kReqNull && j < c; j += kGpuBlock) {
      const float x_hat = (ToArith(x[start + j * inner]) - m) * rs;
      const float g = ToArith(dy[start + j * inner]) * gamma[j];
      Store1(dx + start + j * inner, rs * (g - a - x_hat * b), req_dx);
    }
  }
}

// The warp kernels' row: kPacks packs of V = 16 / sizeof(T) values a lane (T the data's type; a
// 16-bit y or dy of float data moves in packs of 4, 8 bytes), lane l's pack k at (k * 32 + l) * V;
// a pack past c is left out (zeros). c % V == 0.
template <typename T>
struct LnPack {
  static constexpr int V = 16 / sizeof(T);
};

template <int kPacks, int V, typename X>
__device__ inline void LoadRow(const X* row, int64 c, int lane, float (&v)[kPacks][V]) {
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64 j = (static_cast<int64>(k) * 32 + lane) * V;
    if (j < c) {
      LoadN<V>(row + j, v[k]);
    } else {
#pragma unroll
      for (int e = 0; e < V; ++e) v[k][e] = 0;
    }
  }
}

// The packs of LoadRow for two rows at once (dy's and x's), as loaded: not converted, so 16-bit
// data takes half the registers. Packs past c are left unset (never read).
template <int kPacks, int V, typename U, typename T>
__device__ inline void LoadRowPacks(const U* dy_row, const T* x_row, int64 c, int lane,
                                    Pack<U, V> (&d)[kPacks], Pack<T, V> (&x)[kPacks]) {
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64 j = (static_cast<int64>(k) * 32 + lane) * V;
    if (j < c) {
      d[k] = *reinterpret_cast<const Pack<U, V>*>(dy_row + j);
      x[k] = *reinterpret_cast<const Pack<T, V>*>(x_row + j);
    }
  }
}

// V floats of a parameter from p + j (16-byte aligned: V is a multiple of 4).
template <int V>
__device__ inline void LoadParams(const float* p, float (&out)[V]) {
#pragma unroll
  for (int q = 0; q < V; q += 4) {
    float four[4];
    LoadN<4>(p + q, four);
#pragma unroll
    for (int e = 0; e < 4; ++e) out[q + e] = four[e];
  }
}

// LnForward for contiguous rows, a warp a row (grid-strided over the warps).
template <typename T, typename U, int kPacks>
__global__ void LnForwardWarp(const T* x, const float* gamma, const float* beta, U* y, float* mean,
                              float* rstd, int64 rows, int64 c, float eps, int req_y, int req_mean,
                              int req_rstd) {
  constexpr int V = LnPack<T>::V;
  const int lane = threadIdx.x % 32;
  for (int64 r = GlobalThread() / 32; r < rows; r += GridThreads() / 32) {
    float v[kPacks][V];
    LoadRow(x + r * c, c, lane, v);
    float sum = 0;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
#pragma unroll
      for (int e = 0; e < V; ++e) sum += v[k][e];
    }
    const float m = WarpSum(sum) / static_cast<float>(c);
    float squares = 0;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const bool in_row = (static_cast<int64>(k) * 32 + lane) * V < c;
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float d = in_row ? v[k][e] - m : 0.0f;
        squares += d * d;
      }
    }
    const float rs = 1.0f / Sqrt(WarpSum(squares) / static_cast<float>(c) + eps);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64 j = (static_cast<int64>(k) * 32 + lane) * V;
      if (j >= c) continue;
      float g[V], b[V], out[V];
      LoadParams(gamma + j, g);
      LoadParams(beta + j, b);
#pragma unroll
      for (int e = 0; e < V; ++e) out[e] = (v[k][e] - m) * rs * g[e] + b[e];
      StoreN<V>(y + r * c + j, out, req_y);
    }
    if (lane == 0) {
      Store1(mean + r, m, req_mean);
      Store1(rstd + r, rs, req_rstd);
    }
  }
}

// The warps of a LnBackwardWarp block.
constexpr int kLnWarps = kGpuBlock / 32;

// LnBackward for contiguous rows, a warp a row (the block's warps on rows w, w + W, ... of the W
// warps of the grid). A lane holds its packs of the row's dy and x as loaded (16-bit data stays
// 16-bit in registers) and loads the next row's while it computes this one's, so each warp keeps
// two rows' reads in flight; it sums the parameter gradients of its values over its rows in
// float registers, and the block's warps add theirs in a fixed tree in shared memory into the
// block's partial row (partial[blockIdx.x * 2c + j], as LnBackward's). Two rows' packs and the
// sums take more than 128 registers a thread, so one block an SM (under 128, bfloat16's three
// packs spilled 368 bytes): the launch gives each warp several rows.
template <typename T, typename U, int kPacks>
__global__ void __launch_bounds__(kGpuBlock, 1)
    LnBackwardWarp(const U* dy, const T* x, const float* gamma, const float* mean,
                   const float* rstd, T* dx, float* partial, int64 rows, int64 c, int req_dx) {
  constexpr int V = LnPack<T>::V;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float pg[kPacks][V], pb[kPacks][V];
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
#pragma unroll
    for (int e = 0; e < V; ++e) pg[k][e] = pb[k][e] = 0;
  }
  const int64 stride = GridThreads() / 32;
  Pack<U, V> d_next[kPacks];
  Pack<T, V> x_next[kPacks];
  int64 r = GlobalThread() / 32;
  if (r < rows) LoadRowPacks(dy + r * c, x + r * c, c, lane, d_next, x_next);
  for (; r < rows; r += stride) {
    Pack<U, V> d_raw[kPacks];
    Pack<T, V> x_raw[kPacks];
#pragma unroll
    for (int k = 0; k < kPacks; ++k) d_raw[k] = d_next[k], x_raw[k] = x_next[k];
    const float m = mean[r], rs = rstd[r];
    if (r + stride < rows)
      LoadRowPacks(dy + (r + stride) * c, x + (r + stride) * c, c, lane, d_next, x_next);
    float sum_g = 0, sum_g_x_hat = 0;
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64 j = (static_cast<int64>(k) * 32 + lane) * V;
      if (j >= c) continue;
      float g[V];
      LoadParams(gamma + j, g);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float d = ToArith(d_raw[k].v[e]), x_hat = (ToArith(x_raw[k].v[e]) - m) * rs;
        sum_g += d * g[e];
        sum_g_x_hat += d * g[e] * x_hat;
        pg[k][e] += d * x_hat;
        pb[k][e] += d;
      }
    }
    const float a = WarpSum(sum_g) / static_cast<float>(c);
    const float b = WarpSum(sum_g_x_hat) / static_cast<float>(c);
#pragma unroll
    for (int k = 0; k < kPacks; ++k) {
      const int64 j = (static_cast<int64>(k) * 32 + lane) * V;
      if (req_dx == kReqNull || j >= c) continue;
      float g[V], out[V];
      LoadParams(gamma + j, g);
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const float x_hat = (ToArith(x_raw[k].v[e]) - m) * rs;
        out[e] = rs * (ToArith(d_raw[k].v[e]) * g[e] - a - x_hat * b);
      }
      StoreN<V>(dx + r * c + j, out, req_dx);
    }
  }
  if (partial == nullptr) return;
  __shared__ float tree[2][kLnWarps / 2][kGpuLnWarpMaxC];
  // warps [h, 2h) hand their sums to warps [0, h), h = kLnWarps / 2, ..., 1
  for (int h = kLnWarps / 2; h > 0; h /= 2) {
    if (warp >= h && warp < 2 * h) {
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const int64 j = (static_cast<int64>(k) * 32 + lane) * V + e;
          if (j < c) tree[0][warp - h][j] = pg[k][e], tree[1][warp - h][j] = pb[k][e];
        }
      }
    }
    __syncthreads();
    if (warp < h) {
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const int64 j = (static_cast<int64>(k) * 32 + lane) * V + e;
          if (j < c) pg[k][e] += tree[0][warp][j], pb[k][e] += tree[1][warp][j];
        }
      }
    }
    __syncthreads();
  }
  if (warp != 0) return;
  float* block_partial = partial + blockIdx.x * 2 * c;
#pragma unroll
  for (int k = 0; k < kPacks; ++k) {
    const int64 j = (static_cast<int64>(k) * 32 + lane) * V;
    if (j >= c) continue;
    StoreN<V>(block_partial + j, pg[k], kReqWrite);
    StoreN<V>(block_partial + c + j, pb[k], kReqWrite);
  }
}

// The columns a LnParamGradSum block sums, and the slices of the partial rows its threads split.
constexpr int kLnSumColumns = 32, kLnSumSlices = kGpuBlock / kLnSumColumns;

// d_gamma and d_beta from the backward's partial rows (`blocks` rows of 2c: c for gamma, then c
// for beta), as req_gamma and req_beta say: a block per 32 of the 2c columns, its 8 slices of
// threads summing rows s, s + 8, ... of a column in order, then slice 0 adding the 8 in order
// (deterministic: no atomics).
__global__ void LnParamGradSum(const float* partial, int64 blocks, int64 c, float* d_gamma,
                               float* d_beta, int req_gamma, int req_beta) {
  __shared__ float sums[kLnSumSlices][kLnSumColumns];
  const int column = threadIdx.x % kLnSumColumns, slice = threadIdx.x / kLnSumColumns;
  const int64 j = static_cast<int64>(blockIdx.x) * kLnSumColumns + column;
  float sum = 0;
  for (int64 row = slice; j < 2 * c && row < blocks; row += kLnSumSlices)
    sum += partial[row * 2 * c + j];
  sums[slice][column] = sum;
  __syncthreads();
  if (slice != 0 || j >= 2 * c) return;
  float total = 0;
#pragma unroll
  for (int s = 0; s < kLnSumSlices; ++s) total += sums[s][column];
  if (j < c) {
    Store1(d_gamma + j, total, req_gamma);
  } else {
    Store1(d_beta + (j - c), total, req_beta);
  }
}

}  // namespace weft
