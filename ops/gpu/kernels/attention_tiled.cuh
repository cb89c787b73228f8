// Attention's kernels for heads of at most 64 columns (D and Dv <= kAtTile), register-tiled: what
// AttnForward, AttnQueryGrad and AttnKeyGrad (attention.cuh) compute, with the same scores,
// masks, causal skip and dropout (their helpers), the same lse, and no Tq x Tk matrix; the data
// float, bfloat16 or float16, the arithmetic float. ops/gpu/attention.cc launches these for such
// heads (unless WEFT_GPU_TILED_ATTENTION=0), and attention.cuh's for the rest (float64, wider
// heads).
//
// attention.cuh's kernels give a thread 4 scores of one row a visited tile, so a thread reads a
// shared value for every multiply-add. Here a block of kGpuBlock threads owns kAtTile rows of one
// (b, h) pair (queries for the forward and d_q, keys for d_k and d_v) and visits the others
// kAtTile at a time; thread (ty, tx) = (t / 16, t % 16) holds a 4 x 4 block of the tile's scores
// (rows 4 ty .. 4 ty + 3, visited rows 4 tx .. 4 tx + 3) and of each output (the same rows,
// columns 4 tx .. 4 tx + 3), and a product's step reads two packs of 4 floats from shared memory
// for 16 multiply-adds (AtProductTN), or eight for 64 (AtProductNT). A row's 64 scores lie in the
// 16 adjacent lanes of one ty, which reduce its maximum and sum by shuffles.
//
// Shared memory (the launch's dynamic shared memory, kAtTile x kAtTile floats a tile): rows as
// they lie in memory (AtStage: coalesced reads), and the weights of a product written transposed
// from registers (AtStoreTransposed). AtIndex permutes each row's 4-float groups by the row, so
// that every access of a warp is free of bank conflicts or spread over 8 banks at worst.
//
//   AttnForwardTiled:   3 tiles: q, then per key tile k (S = q k^T), the weights, v.
//   AttnQueryGradTiled: 5 tiles: q and out_grad, then per key tile k, v and the weights dS.
//   AttnKeyGradTiled:   5 tiles: k and v, then per query tile q, out_grad and the weights (P Z,
//                       then dS).
#pragma once

#include "attention.cuh"

namespace weft {

constexpr int kAtLanes = 16;  // threads of a row group (one ty): a row's scores among them
constexpr int kAtTileFloats = kAtTile * kAtTile;
typedef Pack<float, 4> AtPack;  // the shared tiles' unit: every 4-float group aligned

// Element (row, col) of a shared tile: row-major, the 4-float groups of a row permuted.
__device__ inline int AtIndex(int row, int col) {
  return row * kAtTile + ((((col >> 2) ^ (row >> 2)) & 15) << 2) + (col & 3);
}

// The 4 floats at (row, col .. col + 3) of a tile, col a multiple of 4.
__device__ inline Pack<float, 4> AtLoad4(const float* tile, int row, int col) {
  return *reinterpret_cast<const Pack<float, 4>*>(tile + AtIndex(row, col));
}

__device__ inline int AtTy() { return threadIdx.x / kAtLanes; }
__device__ inline int AtTx() { return threadIdx.x % kAtLanes; }

// tile(r, c) = x[x0 + r][c] for r, c < kAtTile; 0 past x's rows or its first `cols` columns.
// Consecutive threads read consecutive 4-element groups of a row (a 16-byte load each for float
// data, when x's rows start aligned), or consecutive elements where they do not. All threads of
// the block call it.
template <typename T>
__device__ inline void AtStage(const AttnRows<T>& x, int64 x0, int64 cols, float* tile) {
  constexpr int kGroups = kAtTile / 4;
  const bool packs =
      reinterpret_cast<unsigned long long>(x.base) % (4 * sizeof(T)) == 0 && x.stride % 4 == 0;
  if (!packs) {
    for (int e = threadIdx.x; e < kAtTileFloats; e += kGpuBlock) {
      const int r = e / kAtTile, c = e % kAtTile;
      const int64 row = x0 + r;
      tile[AtIndex(r, c)] =
          row < x.rows && c < cols ? static_cast<float>(ToArith(x.base[row * x.stride + c])) : 0.f;
    }
    return;
  }
  for (int e = threadIdx.x; e < kAtTileFloats / 4; e += kGpuBlock) {
    const int r = e / kGroups, c = e % kGroups * 4;
    const int64 row = x0 + r;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (row < x.rows && c + 4 <= cols) {
      LoadN<4>(x.base + row * x.stride + c, v);
    } else if (row < x.rows) {
      for (int j = 0; c + j < cols && j < 4; ++j) v[j] = ToArith(x.base[row * x.stride + c + j]);
    }
    *reinterpret_cast<AtPack*>(tile + AtIndex(r, c)) = AtPack{{v[0], v[1], v[2], v[3]}};
  }
}

// tile(4 tx + e, 4 ty + i) = w[i][e]: the thread's 4 x 4 block, transposed.
__device__ inline void AtStoreTransposed(const float (&w)[4][4], float* tile) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const Pack<float, 4> column = {{w[0][e], w[1][e], w[2][e], w[3][e]}};
    *reinterpret_cast<Pack<float, 4>*>(tile + AtIndex(4 * AtTx() + e, 4 * AtTy())) = column;
  }
}

// acc[i][e] += sum over n < steps of a(n, 4 ty + i) * b(n, 4 tx + e).
__device__ inline void AtProductTN(const float* a, const float* b, int steps, float (&acc)[4][4]) {
  const int ty = AtTy(), tx = AtTx();
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

// acc[i][e] = sum over n < steps of a(4 ty + i, n) * b(4 tx + e, n) (steps a multiple of 4 or
// the tile's columns past `steps` 0).
__device__ inline void AtProductNT(const float* a, const float* b, int steps, float (&acc)[4][4]) {
  const int ty = AtTy(), tx = AtTx();
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = 0;
  }
  for (int n = 0; n < steps; n += 4) {
    Pack<float, 4> x[4], y[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) x[r] = AtLoad4(a, 4 * ty + r, n), y[r] = AtLoad4(b, 4 * tx + r, n);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[i][e] += x[i].v[c] * y[e].v[c];
      }
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

// A block's rows: its item's (b, h) pair and first row, of `rows` rows a pair.
__device__ inline AttnItem AtItemOf(const GpuAttention& p, int64 item, int64 rows) {
  const int64 tiles = (rows + kAtTile - 1) / kAtTile, bh = item / tiles;
  return {bh / p.h, bh % p.h, bh, item % tiles * kAtTile, 0};
}
__device__ inline int64 AtItems(const GpuAttention& p, int64 rows) {
  return p.b * p.h * ((rows + kAtTile - 1) / kAtTile);
}

// Stores the thread's 4 x 4 block `scale * acc` into rows row0 + 4 ty + i (below `rows`),
// columns 4 tx + e (below `cols`), of a tensor at `base` with row stride `stride`.
template <typename T>
__device__ inline void AtStoreBlock(const float (&acc)[4][4], float scale, T* base, int64 stride,
                                    int64 row0, int64 rows, int64 cols, int req) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64 row = row0 + 4 * AtTy() + i;
    if (row >= rows) continue;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64 col = 4 * AtTx() + e;
      if (col < cols) Store1(base + row * stride + col, scale * acc[i][e], req);
    }
  }
}

// Folds a key tile's scores (s: the thread's 4 x 4 dot products, made scores here) into the
// running maximum m and sum l of its 4 queries, rescales acc, and leaves in s the tile's weights
// (probabilities up to the common factor exp(-m), times their dropout factors): AttnFold's
// arithmetic, for this layout.
template <typename M>
__device__ inline void AtFold(const GpuAttention& p, const AttnItem& it, int64 j0, const M* mask,
                              const AttnDrop<float>& z, float (&s)[4][4], float (&m)[4],
                              float (&l)[4], float (&acc)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int64 qi = it.row0 + 4 * AtTy() + i;
    float tile_max = AttnMinusInf<float>();
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      s[i][e] = AttnScore(p, mask, it.bi, it.hi, qi, j0 + 4 * AtTx() + e, s[i][e]);
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
      s[i][e] = pr * AttnKeep(z, p, it.bi, it.hi, qi, j0 + 4 * AtTx() + e);
    }
    l[i] = l[i] * alpha + AtRowSum(sum);
    m[i] = m_new;
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] *= alpha;
  }
}

// out (B, H, Tq, Dv) by out's strides and lse (B, H, Tq), as req_out and req_lse say. A block per
// item of AtItems(p, Tq); 3 tiles of dynamic shared memory.
template <typename T, typename M>
__global__ void AttnForwardTiled(const T* q, const T* k, const T* v, const M* mask, T* out,
                                 float* lse, GpuAttention p, GpuAttnDropout dropout, int req_out,
                                 int req_lse) {
  WEFT_DYNAMIC_SHARED(AtPack, shared);
  float* const qs = shared[0].v;             // [query][column]
  float* const kv = qs + kAtTileFloats;      // [key][column]: keys, then values
  float* const ws = qs + 2 * kAtTileFloats;  // [key][query]
  const AttnDrop<float> z = AttnDropOf<float>(dropout);
  for (int64 item = blockIdx.x; item < AtItems(p, p.tq); item += gridDim.x) {
    const AttnItem it = AtItemOf(p, item, p.tq);
    const AttnPair<T> r = AttnPairOf(p, it, q, k, v, static_cast<const T*>(nullptr));
    __syncthreads();  // the previous item's readers of qs are done
    AtStage(r.q, it.row0, p.d, qs);
    float acc[4][4] = {}, m[4], l[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) m[i] = AttnMinusInf<float>(), l[i] = 0;
    const int64 key_end = p.causal ? min(p.tk, it.row0 + kAtTile) : p.tk;
    for (int64 j0 = 0; j0 < key_end; j0 += kAtTile) {
      __syncthreads();  // qs is staged; the last tile's readers of kv and ws are done
      AtStage(r.k, j0, p.d, kv);
      __syncthreads();
      float s[4][4];
      AtProductNT(qs, kv, static_cast<int>(p.d), s);
      AtFold(p, it, j0, mask, z, s, m, l, acc);
      __syncthreads();  // every thread is done with the keys in kv
      AtStoreTransposed(s, ws);
      AtStage(r.v, j0, p.dv, kv);
      __syncthreads();
      AtProductTN(ws, kv, static_cast<int>(min(static_cast<int64>(kAtTile), key_end - j0)), acc);
    }
    float y[4][4];  // the output: acc over the sum of the weights
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64 qi = it.row0 + 4 * AtTy() + i;
      const bool empty = l[i] == 0.f;  // every key masked: out 0, lse -inf
#pragma unroll
      for (int e = 0; e < 4; ++e) y[i][e] = empty ? 0.f : acc[i][e] / l[i];
      if (AtTx() == 0 && qi < p.tq) {
        Store1(lse + it.bh * p.tq + qi, empty ? AttnMinusInf<float>() : m[i] + Log(l[i]), req_lse);
      }
    }
    AtStoreBlock(y, 1.f, out + it.bi * p.o.b + it.hi * p.o.h, p.o.t, it.row0, p.tq, p.dv, req_out);
  }
}

// The probabilities P and the weights dS = P (Z dP - delta) of a thread's 4 x 4 block of
// (query, key) pairs, from their scores' dot products s and dP = out_grad . v; `keep` gets P Z.
// The block's rows are queries from row0 and its columns keys from col0 (kQueryRows), or the
// rows keys and the columns queries; lse and delta are read once per query.
template <bool kQueryRows, typename M>
__device__ inline void AtGradWeights(const GpuAttention& p, const AttnItem& it, const M* mask,
                                     const AttnDrop<float>& z, const float* lse, const float* delta,
                                     int64 row0, int64 col0, const float (&s)[4][4],
                                     const float (&dp)[4][4], float (&keep)[4][4],
                                     float (&ds)[4][4]) {
  const int64 q0 = kQueryRows ? row0 + 4 * AtTy() : col0 + 4 * AtTx();
  const int64 k0 = kQueryRows ? col0 + 4 * AtTx() : row0 + 4 * AtTy();
  float lse_q[4], delta_q[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    const bool in = q0 + n < p.tq;
    lse_q[n] = in ? lse[it.bh * p.tq + q0 + n] : AttnMinusInf<float>();
    delta_q[n] = in ? delta[it.bh * p.tq + q0 + n] : 0.f;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int nq = kQueryRows ? i : e, nk = kQueryRows ? e : i;
      const float pr =
          AttnProbability(AttnScore(p, mask, it.bi, it.hi, q0 + nq, k0 + nk, s[i][e]), lse_q[nq]);
      const float zk = AttnKeep(z, p, it.bi, it.hi, q0 + nq, k0 + nk);
      keep[i][e] = pr * zk;
      ds[i][e] = pr == 0.f ? 0.f : pr * (zk * dp[i][e] - delta_q[nq]);
    }
  }
}

// d_q (q's strides) as req says. A block per item of AtItems(p, Tq); 5 tiles of dynamic shared
// memory.
template <typename T, typename M>
__global__ void AttnQueryGradTiled(const T* dy, const T* q, const T* k, const T* v, const M* mask,
                                   const float* lse, const float* delta, T* dq, GpuAttention p,
                                   GpuAttnDropout dropout, int req) {
  WEFT_DYNAMIC_SHARED(AtPack, shared);
  float* const qs = shared[0].v;             // [query][column]
  float* const dys = qs + kAtTileFloats;     // [query][column]
  float* const ks = qs + 2 * kAtTileFloats;  // [key][column]
  float* const vs = qs + 3 * kAtTileFloats;  // [key][column]
  float* const ws = qs + 4 * kAtTileFloats;  // [key][query]
  const AttnDrop<float> z = AttnDropOf<float>(dropout);
  for (int64 item = blockIdx.x; item < AtItems(p, p.tq); item += gridDim.x) {
    const AttnItem it = AtItemOf(p, item, p.tq);
    const AttnPair<T> r = AttnPairOf(p, it, q, k, v, dy);
    __syncthreads();  // the previous item's readers are done
    AtStage(r.q, it.row0, p.d, qs);
    AtStage(r.dy, it.row0, p.dv, dys);
    float acc[4][4] = {};
    const int64 key_end = p.causal ? min(p.tk, it.row0 + kAtTile) : p.tk;
    for (int64 j0 = 0; j0 < key_end; j0 += kAtTile) {
      __syncthreads();  // the last tile's readers of ks, vs and ws are done
      AtStage(r.k, j0, p.d, ks);
      AtStage(r.v, j0, p.dv, vs);
      __syncthreads();
      float s[4][4], dp[4][4], keep[4][4], ds[4][4];
      AtProductNT(qs, ks, static_cast<int>(p.d), s);
      AtProductNT(dys, vs, static_cast<int>(p.dv), dp);
      AtGradWeights</*kQueryRows=*/true>(p, it, mask, z, lse, delta, it.row0, j0, s, dp, keep, ds);
      AtStoreTransposed(ds, ws);
      __syncthreads();
      AtProductTN(ws, ks, static_cast<int>(min(static_cast<int64>(kAtTile), key_end - j0)), acc);
    }
    AtStoreBlock(acc, static_cast<float>(p.scale), dq + it.bi * p.q.b + it.hi * p.q.h, p.q.t,
                 it.row0, p.tq, p.d, req);
  }
}

// d_k (k's strides) and d_v (v's strides) as req_dk and req_dv say. A block per item of
// AtItems(p, Tk): its rows are keys, and the thread's blocks are indexed [key][query]; 5 tiles of
// dynamic shared memory.
template <typename T, typename M>
__global__ void AttnKeyGradTiled(const T* dy, const T* q, const T* k, const T* v, const M* mask,
                                 const float* lse, const float* delta, T* dk, T* dv, GpuAttention p,
                                 GpuAttnDropout dropout, int req_dk, int req_dv) {
  WEFT_DYNAMIC_SHARED(AtPack, shared);
  float* const ks = shared[0].v;              // [key][column]
  float* const vs = ks + kAtTileFloats;       // [key][column]
  float* const qs = ks + 2 * kAtTileFloats;   // [query][column]
  float* const dys = ks + 3 * kAtTileFloats;  // [query][column]
  float* const ws = ks + 4 * kAtTileFloats;   // [query][key]
  const AttnDrop<float> z = AttnDropOf<float>(dropout);
  for (int64 item = blockIdx.x; item < AtItems(p, p.tk); item += gridDim.x) {
    const AttnItem it = AtItemOf(p, item, p.tk);
    const AttnPair<T> r = AttnPairOf(p, it, q, k, v, dy);
    __syncthreads();  // the previous item's readers are done
    AtStage(r.k, it.row0, p.d, ks);
    AtStage(r.v, it.row0, p.dv, vs);
    float acc_k[4][4] = {}, acc_v[4][4] = {};
    // Causal: queries before the tile's first key see none of its keys.
    for (int64 i0 = p.causal ? it.row0 : 0; i0 < p.tq; i0 += kAtTile) {
      __syncthreads();  // the last tile's readers of qs, dys and ws are done
      AtStage(r.q, i0, p.d, qs);
      AtStage(r.dy, i0, p.dv, dys);
      __syncthreads();
      float s[4][4], dp[4][4], keep[4][4], ds[4][4];
      AtProductNT(ks, qs, static_cast<int>(p.d), s);
      AtProductNT(vs, dys, static_cast<int>(p.dv), dp);
      AtGradWeights</*kQueryRows=*/false>(p, it, mask, z, lse, delta, it.row0, i0, s, dp, keep, ds);
      const int queries = static_cast<int>(min(static_cast<int64>(kAtTile), p.tq - i0));
      AtStoreTransposed(keep, ws);
      __syncthreads();
      AtProductTN(ws, dys, queries, acc_v);
      __syncthreads();  // every thread is done with P Z in ws
      AtStoreTransposed(ds, ws);
      __syncthreads();
      AtProductTN(ws, qs, queries, acc_k);
    }
    AtStoreBlock(acc_k, static_cast<float>(p.scale), dk + it.bi * p.k.b + it.hi * p.k.h, p.k.t,
                 it.row0, p.tk, p.d, req_dk);
    AtStoreBlock(acc_v, 1.f, dv + it.bi * p.v.b + it.hi * p.v.h, p.v.t, it.row0, p.tk, p.dv,
                 req_dv);
  }
}

}  // namespace weft
