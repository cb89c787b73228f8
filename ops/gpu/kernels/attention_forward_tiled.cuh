// Attention's forward for heads of at most 64 columns (D and Dv <= kAtTile), register-tiled: what
// AttnForward (attention.cuh) computes, out = softmax(s) v and lse per query with the online
// softmax, the same scores, masks, causal skip and dropout (its helpers), with no Tq x Tk matrix;
// the data float, bfloat16 or float16, the arithmetic float. ops/gpu/attention.cc launches it for
// those heads and AttnForward for the rest (float64, wider heads).
//
// AttnForward gives each of its threads 4 scores of one query a visited tile, so a thread reads
// a shared value for every multiply-add. Here a block of kGpuBlock threads owns kAtTile queries
// of one (b, h) pair and visits the keys kAtTile at a time; thread (ty, tx) = (t / 16, t % 16)
// holds a 4 x 4 block of the tile's scores (queries 4 ty .. 4 ty + 3, keys 4 tx .. 4 tx + 3) and
// of the output (the same queries, columns 4 tx .. 4 tx + 3), and each step of its products
// reads two packs of 4 floats from shared memory for 16 multiply-adds. A query's 64 scores lie
// in the 16 adjacent lanes of one ty, which reduce its maximum and sum by shuffles.
//
// Shared memory, 3 tiles of kAtTile x kAtTile floats (48 KB, the static limit): the queries as
// [column][query], the keys as [column][key] and then the values as [key][column] in one tile,
// and the weights as [key][query]. AtIndex permutes each row's 4-float groups by the row, so the
// transposing stores of a warp (32 rows, one column) spread over 8 banks while every read of a
// 4-float group stays aligned and conflict-free.
#pragma once

#include "attention.cuh"

namespace weft {

constexpr int kAtLanes = 16;  // threads of a row group (one ty): a query's scores among them

// Element (row, col) of a shared tile: row-major, the 4-float groups of a row permuted.
__device__ inline int AtIndex(int row, int col) {
  return row * kAtTile + ((((col >> 2) ^ (row >> 2)) & 15) << 2) + (col & 3);
}

// The 4 floats at (row, col .. col + 3) of a tile, col a multiple of 4.
__device__ inline Pack<float, 4> AtLoad4(const float* tile, int row, int col) {
  return *reinterpret_cast<const Pack<float, 4>*>(tile + AtIndex(row, col));
}

// tile(r, c) = x[x0 + r][c] for r, c < kAtTile, or tile(c, r) when `transposed`; 0 past x's rows
// or its first `cols` columns. Consecutive threads read consecutive columns of a row
// (coalesced). All threads of the block call it.
template <typename T>
__device__ inline void AtStage(const AttnRows<T>& x, int64 x0, int64 cols, bool transposed,
                               float* tile) {
  for (int e = threadIdx.x; e < kAtTile * kAtTile; e += kGpuBlock) {
    const int r = e / kAtTile, c = e % kAtTile;
    const int64 row = x0 + r;
    tile[transposed ? AtIndex(c, r) : AtIndex(r, c)] =
        row < x.rows && c < cols ? static_cast<float>(ToArith(x.base[row * x.stride + c])) : 0.f;
  }
}

// acc[i][e] += sum over n < steps of a(n, 4 ty + i) * b(n, 4 tx + e): the 4 x 4 block of a
// product whose operands lie in shared tiles as [step][row] and [step][column].
__device__ inline void AtProduct(const float* a, const float* b, int steps, float (&acc)[4][4]) {
  const int ty = threadIdx.x / kAtLanes, tx = threadIdx.x % kAtLanes;
#pragma unroll 4
  for (int n = 0; n < steps; ++n) {
    const Pack<float, 4> x = AtLoad4(a, n, 4 * ty), y = AtLoad4(b, n, 4 * tx);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][e] += x.v[i] * y.v[e];
    }
  }
}

// The maximum and the sum over the kAtLanes lanes of a row group (adjacent lanes of one warp).
__device__ inline float AtRowMax(float v) {
  for (int o = kAtLanes / 2; o > 0; o /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}
__device__ inline float AtRowSum(float v) {
  for (int o = kAtLanes / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The queries of a block: its item's (b, h) pair and first query.
struct AtItem {
  int64 bi, hi, bh, row0;
};
__device__ inline AtItem AtItemOf(const GpuAttention& p, int64 item) {
  const int64 tiles = (p.tq + kAtTile - 1) / kAtTile, bh = item / tiles;
  return {bh / p.h, bh % p.h, bh, item % tiles * kAtTile};
}

// Folds a key tile's scores (s: the thread's 4 x 4 dot products, made scores here) into the
// running maximum m and sum l of its 4 queries, rescales acc, and leaves in s the tile's weights
// (probabilities up to the common factor exp(-m), times their dropout factors). AttnFold's
// arithmetic, for this kernel's layout.
template <typename M>
__device__ inline void AtFoldTile(const GpuAttention& p, const AtItem& it, int64 j0, const M* mask,
                                  const AttnDrop<float>& z, float (&s)[4][4], float (&m)[4],
                                  float (&l)[4], float (&acc)[4][4]) {
  const int ty = threadIdx.x / kAtLanes, tx = threadIdx.x % kAtLanes;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64 qi = it.row0 + 4 * ty + i;
    float tile_max = AttnMinusInf<float>();
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[i][e] = AttnScore(p, mask, it.bi, it.hi, qi, j0 + 4 * tx + e, s[i][e]);
      tile_max = s[i][e] > tile_max ? s[i][e] : tile_max;
    }
    const float row_max = AtRowMax(tile_max);
    const float m_new = row_max > m[i] ? row_max : m[i];
    const bool none = m_new == AttnMinusInf<float>();    // every key so far is masked
    const float alpha = none ? 1.f : Exp(m[i] - m_new);  // 0 when nothing was summed
    float sum = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pr = none ? 0.f : AttnProbability(s[i][e], m_new);
      sum += pr;
      s[i][e] = pr * AttnKeep(z, p, it.bi, it.hi, qi, j0 + 4 * tx + e);
    }
    l[i] = l[i] * alpha + AtRowSum(sum);
    m[i] = m_new;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] *= alpha;
  }
}

// out (B, H, Tq, Dv) by out's strides and lse (B, H, Tq), as req_out and req_lse say. A block per
// item of (B * H) x ceil(Tq / kAtTile); D, Dv <= kAtTile.
template <typename T, typename M>
__global__ void AttnForwardTiled(const T* q, const T* k, const T* v, const M* mask, T* out,
                                 float* lse, GpuAttention p, GpuAttnDropout dropout, int req_out,
                                 int req_lse) {
  // Tiles of packs, so that every 4-float group is aligned for AtLoad4.
  __shared__ Pack<float, 4> tiles[3][kAtTile * kAtTile / 4];
  float* const qs = tiles[0][0].v;  // [column][query]
  float* const kv = tiles[1][0].v;  // [column][key], then [key][column]
  float* const ws = tiles[2][0].v;  // [key][query]
  const AttnDrop<float> z = AttnDropOf<float>(dropout);
  const int ty = threadIdx.x / kAtLanes, tx = threadIdx.x % kAtLanes;
  const int64 items = p.b * p.h * ((p.tq + kAtTile - 1) / kAtTile);
  for (int64 item = blockIdx.x; item < items; item += gridDim.x) {
    const AtItem it = AtItemOf(p, item);
    const AttnPair<T> r = AttnPairOf(p, AttnItem{it.bi, it.hi, it.bh, it.row0, 0}, q, k, v,
                                     static_cast<const T*>(nullptr));
    __syncthreads();  // the previous item's readers of qs are done
    AtStage(r.q, it.row0, p.d, /*transposed=*/true, qs);
    float acc[4][4] = {}, m[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) m[i] = AttnMinusInf<float>(), l[i] = 0;
    const int64 key_end = p.causal ? min(p.tk, it.row0 + kAtTile) : p.tk;
    for (int64 j0 = 0; j0 < key_end; j0 += kAtTile) {
      __syncthreads();  // qs is staged; the last tile's readers of kv and ws are done
      AtStage(r.k, j0, p.d, /*transposed=*/true, kv);
      __syncthreads();
      float s[4][4] = {};
      AtProduct(qs, kv, static_cast<int>(p.d), s);
      AtFoldTile(p, it, j0, mask, z, s, m, l, acc);
      __syncthreads();  // every thread is done with the keys in kv
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const Pack<float, 4> w = {{s[0][e], s[1][e], s[2][e], s[3][e]}};
        *reinterpret_cast<Pack<float, 4>*>(ws + AtIndex(4 * tx + e, 4 * ty)) = w;
      }
      AtStage(r.v, j0, p.dv, /*transposed=*/false, kv);
      __syncthreads();
      AtProduct(ws, kv, static_cast<int>(min(static_cast<int64>(kAtTile), key_end - j0)), acc);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64 qi = it.row0 + 4 * ty + i;
      if (qi >= p.tq) continue;
      const bool empty = l[i] == 0.f;  // every key masked: out 0, lse -inf
      const float inv = empty ? 0.f : 1.f / l[i];
      T* o = out + it.bi * p.o.b + it.hi * p.o.h + qi * p.o.t;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (4 * tx + e < p.dv) Store1(o + 4 * tx + e, acc[i][e] * inv, req_out);
      }
      if (tx == 0) {
        Store1(lse + it.bh * p.tq + qi, empty ? AttnMinusInf<float>() : m[i] + Log(l[i]), req_lse);
      }
    }
  }
}

}  // namespace weft
