// Data movement on any dtype: strided copies (transpose, slice, concat and their gradients) and
// the tiled transpose. A walk (GpuAxes, built by ops/gpu/internal/axes.h) gives, at each of its
// positions, the offset in the destination (array 0) and in the source (array 1); the host points
// both at the first element concerned.
#pragma once

#include "common.cuh"

namespace weft {

// *y = *x as `req` says (a write copies the bits; an add goes through the arithmetic type).
template <typename T>
__device__ inline void MoveElement(const T* x, T* y, int req) {
  if (req == kReqWrite) {
    *y = *x;
  } else if (req == kReqAdd) {
    Store1(y, ToArith(*x), req);
  }
}

// y[off0] = x[off1] at each of the n positions of `walk`.
template <typename T>
__global__ void StridedCopy(const T* x, T* y, GpuAxes walk, int64 n, int req) {
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    int64 off[3] = {0, 0, 0};
    AddOffsets(walk, i, off);
    MoveElement(x + off[1], y + off[0], req);
  }
}

// StridedCopy of whole 16-byte packs: y[off0 * V ...] = x[off1 * V ...] (V elements) at each of
// the n positions of `walk`, whose offsets count packs (the host divides a walk whose innermost
// axis runs contiguously on both sides and every stride by V); a write only (its bits).
template <typename T, int V>
__global__ void StridedCopyPacks(const T* x, T* y, GpuAxes walk, int64 n) {
  for (int64 i = GlobalThread(); i < n; i += GridThreads()) {
    int64 off[3] = {0, 0, 0};
    AddOffsets(walk, i, off);
    *reinterpret_cast<Pack<T, V>*>(y + off[0] * V) =
        *reinterpret_cast<const Pack<T, V>*>(x + off[1] * V);
  }
}

// Transposes in 32 x 32 tiles through shared memory, so that both the reads of x and the writes
// of y are coalesced. y is a batch (the walk `batch`, offsets of y: array 0, of x: array 1) of
// (rows, cols) blocks with y contiguous along cols and x contiguous along rows: y[r, c] at
// r * y_row_stride + c, x's element for it at r + c * x_col_stride.
template <typename T>
__global__ void TransposeTiles(const T* x, T* y, GpuAxes batch, int64 n_batch, int64 rows,
                               int64 cols, int64 y_row_stride, int64 x_col_stride, int req) {
  __shared__ T
      tile[32][33];  // [col][row]; the padding keeps the column reads free of bank conflicts
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = kGpuBlock / 32;
  const int64 row_tiles = (rows + 31) / 32, col_tiles = (cols + 31) / 32;
  const int64 tiles = n_batch * row_tiles * col_tiles;
  for (int64 t = blockIdx.x; t < tiles; t += gridDim.x) {  // the same count for the whole block
    const int64 b = t / (row_tiles * col_tiles), r0 = t / col_tiles % row_tiles * 32,
                c0 = t % col_tiles * 32;
    int64 base[3] = {0, 0, 0};
    AddOffsets(batch, b, base);
    for (int j = warp; j < 32; j += warps) {  // lanes along rows: x is contiguous there
      const int64 r = r0 + lane, c = c0 + j;
      if (r < rows && c < cols) tile[j][lane] = x[base[1] + r + c * x_col_stride];
    }
    __syncthreads();
    for (int j = warp; j < 32; j += warps) {  // lanes along cols: y is contiguous there
      const int64 r = r0 + j, c = c0 + lane;
      if (r < rows && c < cols)
        MoveElement(&tile[lane][j], y + base[0] + r * y_row_stride + c, req);
    }
    __syncthreads();  // the tile is read before the next one overwrites it
  }
}

}  // namespace weft
