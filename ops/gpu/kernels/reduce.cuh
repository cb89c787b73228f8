// Reductions over axes (sum, mean, max) and their gradients, as ops/tensor/reduce.cc defines them.
//
// The host describes a reduction as three nested loops over the input x (ReduceLayout there):
// outer positions b (the walk `outer` over the kept axes outside `inner`), reduced positions r
// (the walk `reduced`, in row-major order of the reduced axes) and `inner` kept positions that
// are contiguous in x and in the output. Output o = b * inner + i reduces the x elements at
// Offset(outer, b) + i + Offset(reduced, r) for r in [0, n_reduced); walks use array 0 of GpuAxes.
//
// Each output is reduced either by a group of G threads (1, a warp, or a block) that split its r,
// or, where inner is wide, by a block that takes 32 neighbouring outputs with 8 threads on each
// (ReduceColumns: reads coalesced along inner; SumColumnsPacked where a sum's rows are whole
// 16-byte packs). Partial results meet in a tree in shared memory;
// the arithmetic type accumulates (float for float32 and bfloat16).
//
// Few outputs of many reduced positions (a gradient's sum of squares, a bias gradient's column
// sums) would leave most of the GPU idle: their r range is cut into `ReduceSlices::count` slices
// of `chunk`, each slice reduced by its own block into a partial result, and ReduceSlicesFinish
// combines an output's partials in slice order. The cut depends on the shape alone, so the result
// is the same at every run.
#pragma once

#include "common.cuh"

namespace weft {

// A running sum.
template <typename A>
struct SumAcc {
  A v;
  static SumAcc Identity() { return {A(0)}; }
  void Add(A x, int64) { v += x; }
  static SumAcc Combine(SumAcc a, SumAcc b) { return {a.v + b.v}; }
};

// The maximum and the reduced position of the first one: NaN beats every number (so the result
// is NaN where any value is), a larger number beats a smaller one, and between equals (two NaNs
// too) the earlier position wins. That order is total, so a tree finds the same position as the
// CPU's scan in row-major order.
template <typename A>
struct MaxAcc {
  A v;
  int64 at;  // -1: nothing seen yet
  static MaxAcc Identity() { return {A(0), -1}; }
  void Add(A x, int64 r) { *this = Combine(*this, MaxAcc{x, r}); }
  static MaxAcc Combine(MaxAcc a, MaxAcc b) {
    if (a.at < 0 || b.at < 0) return a.at < 0 ? b : a;
    const bool a_nan = a.v != a.v, b_nan = b.v != b.v;
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan && a.v != b.v) return a.v > b.v ? a : b;
    return a.at < b.at ? a : b;
  }
};

// Offset in x of element (b, i), the first of the reduced positions of output b * inner + i.
__device__ inline int64 ReduceBase(const GpuAxes& outer, int64 b, int64 i) {
  int64 off[3] = {i, 0, 0};
  AddOffsets(outer, b, off);
  return off[0];
}

__device__ inline int64 ReducedOffset(const GpuAxes& reduced, int64 r) {
  int64 off[3] = {0, 0, 0};
  AddOffsets(reduced, r, off);
  return off[0];
}

// Folds the reduced positions r = first, first + step, ... below end of the output at x + base
// into acc.
template <class Acc, typename T>
__device__ inline void Accumulate(Acc& acc, const T* x, int64 base, const GpuAxes& reduced,
                                  int64 end, int64 first, int step) {
  for (int64 r = first; r < end; r += step)
    acc.Add(ToArith(x[base + ReducedOffset(reduced, r)]), r);
}

// The cut of every output's reduced range: `count` slices of `chunk` positions, the partial result
// of output o's slice s at partials[o * count + s] (an array of the accumulator type). count 1: no
// cut, the kernels finish each output themselves (partials null).
struct ReduceSlices {
  int64 count, chunk;
  void* partials;
};

// Slice s of the reduced range: [begin, end).
struct SliceRange {
  int64 begin, end;
};
__device__ inline SliceRange SliceOf(const ReduceSlices& slices, int64 s, int64 n_reduced) {
  const int64 begin = s * slices.chunk;
  return {begin, begin + slices.chunk < n_reduced ? begin + slices.chunk : n_reduced};
}

// What a reduction kernel does with the result `acc` of the output o (x + base):
// forward (kGrad false): out[o] = acc * scale, by one thread of the output's group (`leader`);
// max's gradient (kGrad true): out, x's shape, gets dy[o] at the maximum and 0 at the other
// reduced positions first, first + step, ...
template <bool kGrad, class Acc, typename T>
__device__ inline void Finish(const Acc& acc, const T* dy, T* out, int64 o, int64 base,
                              const GpuAxes& reduced, int64 n_reduced, int64 first, int step,
                              bool leader, double scale, int req) {
  typedef typename Arith<T>::type A;
  if constexpr (!kGrad) {
    if (leader) Store1(out + o, acc.v * static_cast<A>(scale), req);
  } else {
    const A g = ToArith(dy[o]);
    for (int64 r = first; r < n_reduced; r += step) {
      Store1(out + base + ReducedOffset(reduced, r), r == acc.at ? g : A(0), req);
    }
  }
}

// Groups of G threads (G divides kGpuBlock), one output each, over one slice of its reduced
// range per block. kGrad: max's gradient (Finish; never sliced).
template <template <typename> class AccOf, typename T, int G, bool kGrad>
__global__ void ReducePerGroup(const T* x, const T* dy, T* out, GpuAxes outer, GpuAxes reduced,
                               int64 inner, int64 n_out, int64 n_reduced, ReduceSlices slices,
                               double scale, int req) {
  typedef AccOf<typename Arith<T>::type> Acc;
  constexpr int kGroups = kGpuBlock / G;
  __shared__ Acc partial[G > 1 ? kGpuBlock : 1];
  const int lane = threadIdx.x % G;
  const int64 items = (n_out + kGroups - 1) / kGroups * slices.count;
  // Every thread of the block runs the same number of iterations: the barriers stay uniform.
  for (int64 item = blockIdx.x; item < items; item += gridDim.x) {
    const int64 o = item / slices.count * kGroups + threadIdx.x / G, s = item % slices.count;
    const bool active = o < n_out;
    const int64 base = active ? ReduceBase(outer, o / inner, o % inner) : 0;
    const SliceRange range = SliceOf(slices, s, n_reduced);
    Acc acc = Acc::Identity();
    if (active) Accumulate(acc, x, base, reduced, range.end, range.begin + lane, G);
    if (G > 1) {
      partial[threadIdx.x] = acc;
      __syncthreads();
      for (int half = G / 2; half > 0; half /= 2) {
        if (lane < half)
          partial[threadIdx.x] = Acc::Combine(partial[threadIdx.x], partial[threadIdx.x + half]);
        __syncthreads();
      }
      acc = partial[threadIdx.x - lane];
      __syncthreads();  // read before the next iteration overwrites it
    }
    if (!active) continue;
    if (slices.count > 1) {
      if (lane == 0) static_cast<Acc*>(slices.partials)[o * slices.count + s] = acc;
    } else {
      Finish<kGrad>(acc, dy, out, o, base, reduced, n_reduced, lane, G, lane == 0, scale, req);
    }
  }
}

// Tiles of 32 neighbouring outputs (along inner) of one outer position b, each reduced by the 8
// threads (one per warp) at its lane, over one slice of the reduced range per block. For
// inner >= 32.
template <template <typename> class AccOf, typename T, bool kGrad>
__global__ void ReduceColumns(const T* x, const T* dy, T* out, GpuAxes outer, GpuAxes reduced,
                              int64 inner, int64 n_out, int64 n_reduced, ReduceSlices slices,
                              double scale, int req) {
  typedef AccOf<typename Arith<T>::type> Acc;
  constexpr int kRows = kGpuBlock / 32;
  __shared__ Acc partial[kGpuBlock];
  const int lane = threadIdx.x % 32, row = threadIdx.x / 32;
  const int64 tiles_per_b = (inner + 31) / 32, items = n_out / inner * tiles_per_b * slices.count;
  for (int64 item = blockIdx.x; item < items; item += gridDim.x) {  // the same count per block
    const int64 t = item / slices.count, s = item % slices.count;
    const int64 b = t / tiles_per_b, i = t % tiles_per_b * 32 + lane;
    const bool active = i < inner;
    const int64 base = active ? ReduceBase(outer, b, i) : 0;
    const SliceRange range = SliceOf(slices, s, n_reduced);
    Acc acc = Acc::Identity();
    if (active) Accumulate(acc, x, base, reduced, range.end, range.begin + row, kRows);
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = kRows / 2; half > 0; half /= 2) {
      if (row < half)
        partial[threadIdx.x] = Acc::Combine(partial[threadIdx.x], partial[threadIdx.x + half * 32]);
      __syncthreads();
    }
    acc = partial[lane];
    __syncthreads();  // read before the next tile overwrites it
    if (!active) continue;
    const int64 o = b * inner + i;
    if (slices.count > 1) {
      if (row == 0) static_cast<Acc*>(slices.partials)[o * slices.count + s] = acc;
    } else {
      Finish<kGrad>(acc, dy, out, o, base, reduced, n_reduced, row, kRows, row == 0, scale, req);
    }
  }
}

// Sums (and means) of the columns of rows `stride` apart, the kept axes all after the reduced one
// (a bias gradient's rows, a partial-sum table's): lane l of a tile owns the V = 16 / sizeof(T)
// outputs [i, i + V), read as one pack a row, and the block's 8 warps take every 8th row of the
// slice, four rows in flight at a time; the warps' sums meet in a tree in shared memory. Sliced as
// ReduceColumns is. The host checks that x, n_out and stride are whole packs (PackedColumns).
template <typename T>
__global__ void SumColumnsPacked(const T* x, T* out, int64 n_out, int64 n_reduced, int64 stride,
                                 ReduceSlices slices, double scale, int req) {
  typedef typename Arith<T>::type A;
  constexpr int V = 16 / sizeof(T), kRows = kGpuBlock / 32, kAhead = 4;
  __shared__ A partial[kRows][V * 32];  // [row][j * 32 + lane]: no bank conflicts
  const int lane = threadIdx.x % 32, row = threadIdx.x / 32;
  const int64 items = (n_out + 32 * V - 1) / (32 * V) * slices.count;
  for (int64 item = blockIdx.x; item < items; item += gridDim.x) {
    const int64 s = item % slices.count, i = (item / slices.count * 32 + lane) * V;
    const SliceRange range = SliceOf(slices, s, n_reduced);
    A acc[V];
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = A(0);
    if (i < n_out) {
      int64 r = range.begin + row;
      for (; r + (kAhead - 1) * kRows < range.end; r += kAhead * kRows) {
        A v[kAhead][V];
#pragma unroll
        for (int k = 0; k < kAhead; ++k) LoadN<V>(x + (r + k * kRows) * stride + i, v[k]);
#pragma unroll
        for (int k = 0; k < kAhead; ++k) {
#pragma unroll
          for (int j = 0; j < V; ++j) acc[j] += v[k][j];
        }
      }
      for (; r < range.end; r += kRows) {
        A v[V];
        LoadN<V>(x + r * stride + i, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc[j] += v[j];
      }
    }
#pragma unroll
    for (int j = 0; j < V; ++j) partial[row][j * 32 + lane] = acc[j];
    __syncthreads();
    for (int half = kRows / 2; half > 0; half /= 2) {
      if (row < half) {
#pragma unroll
        for (int j = 0; j < V; ++j)
          partial[row][j * 32 + lane] += partial[row + half][j * 32 + lane];
      }
      __syncthreads();
    }
    if (row == 0 && i < n_out) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A sum = partial[0][j * 32 + lane];
        if (slices.count > 1) {
          static_cast<SumAcc<A>*>(slices.partials)[(i + j) * slices.count + s] = SumAcc<A>{sum};
        } else {
          Store1(out + i + j, sum * static_cast<A>(scale), req);
        }
      }
    }
    __syncthreads();  // row 0 read partial before the next tile overwrites it
  }
}

// out[o] = (the partials of output o combined in slice order) * scale, per req: the second step
// of a sliced reduction (forward only).
template <template <typename> class AccOf, typename T>
__global__ void ReduceSlicesFinish(ReduceSlices slices, T* out, int64 n_out, double scale,
                                   int req) {
  typedef typename Arith<T>::type A;
  typedef AccOf<A> Acc;
  const Acc* partials = static_cast<const Acc*>(slices.partials);
  for (int64 o = GlobalThread(); o < n_out; o += GridThreads()) {
    Acc acc = partials[o * slices.count];
    for (int64 s = 1; s < slices.count; ++s)
      acc = Acc::Combine(acc, partials[o * slices.count + s]);
    Store1(out + o, acc.v * static_cast<A>(scale), req);
  }
}

// The gradient of sum and mean: dx = scale * dy broadcast over the reduced axes; n elements of
// dx, walked by `walk` (array 0: dx, 1: dy, stride 0 along the reduced axes).
template <typename T>
__global__ void ReduceSumBackward(const T* dy, T* dx, GpuAxes walk, int64 n, double scale,
                                  int req) {
  typedef typename Arith<T>::type A;
  for (int64 j = GlobalThread(); j < n; j += GridThreads()) {
    int64 off[3] = {0, 0, 0};
    AddOffsets(walk, j, off);
    Store1(dx + off[0], ToArith(dy[off[1]]) * static_cast<A>(scale), req);
  }
}

}  // namespace weft
