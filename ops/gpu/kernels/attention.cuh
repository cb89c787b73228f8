// Attention's own kernels (ops/gpu/attention.cc): flash attention, tiled over keys, with no
// Tq x Tk matrix anywhere. T is the stored type (float, double or weft::bf16), A the arithmetic
// type (float; double for double), which is also the type of lse and of the row deltas, M the
// mask's (T: additive; unsigned char: boolean). Tensors are read through their (b, h, t) strides
// (GpuAttention), so packed qkv (B, T, 3, H, D) and out (B, T, H, D) are a change of strides.
//
// A block of kGpuBlock threads owns a tile of kAttnTile rows (queries for the forward and d_q,
// keys for d_k and d_v): thread t works on row t / kAttnLanes of the tile with kAttnLanes lanes
// per row. Against each tile of kAttnTile keys (or queries) it visits, a lane holds the scores of
// kAttnPerLane of them, columns lane + kAttnLanes * n, and the block shares one row of weights
// per row in shared memory. The product of those weights with the visited rows accumulates in
// registers: COLS values per thread, of columns col0 + 32 * (a / 4) + lane + 8 * (a % 4) for
// a in [0, COLS), so a block covers 8 * COLS columns of its outputs (item = (b, h, tile, column
// chunk); wider outputs take more chunks, each recomputing the scores). Rows and columns are
// staged through shared memory kAttnTile x kAttnTile at a time.
//
//   AttnForward:   out = softmax(s) v with the running maximum m and sum l per query (online
//                  softmax), lse = m + log(l); a query whose keys are all masked gets out 0 and
//                  lse -inf.
//   AttnDelta:     delta_i = out_grad_i . out_i.
//   AttnQueryGrad: d_q_i = scale * sum_j dS_ij k_j, with P_ij = exp(s_ij - lse_i) recomputed
//                  and dS_ij = P_ij (out_grad_i . v_j - delta_i).
//   AttnKeyGrad:   d_k_j = scale * sum_i dS_ij q_i and d_v_j = sum_i P_ij out_grad_i.
// Dropout (GpuAttnDropout, p > 0) multiplies P_ij by Z_ij (0, or 1 / (1 - p) where
// ops/math/attention_dropout.h keeps (b, h, i, j)) where it meets v: the forward's l sums P before
// dropout; the backward takes dS_ij = P_ij (Z_ij out_grad_i . v_j - delta_i) and
// d_v_j = sum_i P_ij Z_ij out_grad_i (delta_i = out_grad_i . out_i is unchanged).
// Each output element is summed by one thread: no atomics, deterministic. Causal attention skips
// the tiles past the diagonal (key j > query i, aligned top-left).
#pragma once

#include "attention_tiles.cuh"
#include "common.cuh"
#include "ops/math/attention_dropout.h"

namespace weft {

constexpr int kAttnPad = kAttnTile + 1;  // shared rows padded against bank conflicts

template <typename A>
__device__ inline A AttnMinusInf() {
  return -static_cast<A>(__longlong_as_double(0x7ff0000000000000LL));
}

__device__ inline int AttnRow() { return threadIdx.x / kAttnLanes; }
__device__ inline int AttnLane() { return threadIdx.x % kAttnLanes; }

// The rows of one (b, h) pair of a tensor: element (t, c) at base[t * stride + c], t < rows.
template <typename T>
struct AttnRows {
  const T* base;
  int64 rows, stride;
};

template <typename T>
__device__ inline AttnRows<T> AttnRowsOf(const T* p, const GpuAttnStrides& s, int64 bi, int64 hi,
                                         int64 rows) {
  return {p + bi * s.b + hi * s.h, rows, s.t};
}

// The max and the sum over the kAttnLanes lanes of a row (adjacent threads of one warp).
template <typename A>
__device__ inline A AttnRowMax(A v) {
  for (int o = kAttnLanes / 2; o > 0; o /= 2) {
    const A other = __shfl_xor_sync(0xffffffffu, v, o);
    v = other > v ? other : v;
  }
  return v;
}
template <typename A>
__device__ inline A AttnRowSum(A v) {
  for (int o = kAttnLanes / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// xs[r][c] = element (x0 + r, c0 + c) of x, 0 outside its rows or its first `cols` columns. All
// threads of the block call it.
template <typename T, typename A>
__device__ inline void AttnStage(const AttnRows<T>& x, int64 x0, int64 cols, int64 c0,
                                 A (*xs)[kAttnPad]) {
  for (int e = threadIdx.x; e < kAttnTile * kAttnChunk; e += kGpuBlock) {
    const int r = e / kAttnChunk, c = e % kAttnChunk;
    const int64 row = x0 + r, col = c0 + c;
    xs[r][c] = row < x.rows && col < cols ? static_cast<A>(ToArith(x.base[row * x.stride + col]))
                                          : static_cast<A>(0);
  }
}

// dot[n] = x[x0 + AttnRow()] . y[y0 + AttnLane() + kAttnLanes * n] over `cols` columns (0 for
// rows outside x or y). All threads of the block call it; xs and ys are its staging tiles.
template <typename T, typename A>
__device__ inline void AttnTileDots(const AttnRows<T>& x, int64 x0, const AttnRows<T>& y, int64 y0,
                                    int64 cols, A (*xs)[kAttnPad], A (*ys)[kAttnPad],
                                    A (&dot)[kAttnPerLane]) {
  const int row = AttnRow(), lane = AttnLane();
#pragma unroll
  for (int n = 0; n < kAttnPerLane; ++n) dot[n] = 0;
  for (int64 c0 = 0; c0 < cols; c0 += kAttnChunk) {
    __syncthreads();  // the previous readers of xs and ys are done
    AttnStage(x, x0, cols, c0, xs);
    AttnStage(y, y0, cols, c0, ys);
    __syncthreads();
#pragma unroll 8
    for (int c = 0; c < kAttnChunk; ++c) {
      const A xv = xs[row][c];
#pragma unroll
      for (int n = 0; n < kAttnPerLane; ++n) dot[n] += xv * ys[lane + kAttnLanes * n][c];
    }
  }
}

// acc[a] += sum_r w[AttnRow()][r] z[z0 + r][column of a] over the kAttnTile rows of z from z0
// (the file comment says which columns a thread's acc[a] holds; those past `cols` stay 0). All
// threads call it, after w is complete; zs is its staging tile.
template <int COLS, typename T, typename A>
__device__ inline void AttnAccumulate(A (*w)[kAttnPad], const AttnRows<T>& z, int64 z0, int64 cols,
                                      int64 col0, A (*zs)[kAttnPad], A (&acc)[COLS]) {
  const int row = AttnRow(), lane = AttnLane();
#pragma unroll
  for (int ch = 0; ch < COLS / kAttnPerLane; ++ch) {
    const int64 c0 = col0 + ch * kAttnChunk;
    if (c0 >= cols) break;  // the same for every thread
    __syncthreads();
    AttnStage(z, z0, cols, c0, zs);
    __syncthreads();
#pragma unroll 4
    for (int r = 0; r < kAttnTile; ++r) {
      const A wr = w[row][r];
#pragma unroll
      for (int n = 0; n < kAttnPerLane; ++n)
        acc[ch * kAttnPerLane + n] += wr * zs[r][lane + kAttnLanes * n];
    }
  }
  __syncthreads();  // zs and w may be rewritten
}

// The column of a thread's acc[a] (see the file comment).
__device__ inline int64 AttnColumn(int64 col0, int a) {
  return col0 + (a / kAttnPerLane) * kAttnChunk + AttnLane() + kAttnLanes * (a % kAttnPerLane);
}

// A mask element as a term of the score: additive (the data's type), or boolean (bytes: nonzero
// keeps the key, zero masks it).
template <typename A>
__device__ inline A AttnMaskTerm(unsigned char keep) {
  return keep ? static_cast<A>(0) : AttnMinusInf<A>();
}
template <typename A>
__device__ inline A AttnMaskTerm(float m) {
  return static_cast<A>(m);
}
template <typename A>
__device__ inline A AttnMaskTerm(double m) {
  return static_cast<A>(m);
}
template <typename A>
__device__ inline A AttnMaskTerm(bf16 m) {
  return static_cast<A>(ToArith(m));
}
template <typename A>
__device__ inline A AttnMaskTerm(f16 m) {
  return static_cast<A>(ToArith(m));
}

// The score of query i and key j from their dot product: scale * dot + the mask's term; -inf
// where causal masks it or where i or j is past the end.
template <typename M, typename A>
__device__ inline A AttnScore(const GpuAttention& p, const M* mask, int64 bi, int64 hi, int64 i,
                              int64 j, A dot) {
  if (i >= p.tq || j >= p.tk || (p.causal && j > i)) return AttnMinusInf<A>();
  A s = static_cast<A>(p.scale) * dot;
  if (mask) {
    s += AttnMaskTerm<A>(mask[bi * p.mask[0] + hi * p.mask[1] + i * p.mask[2] + j * p.mask[3]]);
  }
  return s;
}

// P = exp(s - lse): 0 for a masked key (s = -inf), so also in a row whose keys are all masked.
template <typename A>
__device__ inline A AttnProbability(A s, A lse) {
  return s == AttnMinusInf<A>() ? static_cast<A>(0) : Exp(s - lse);
}

// One call's dropout with its key resolved (the forward's shift added, or the backward's key
// read): p 0 when nothing is dropped.
template <typename A>
struct AttnDrop {
  double p;
  unsigned long long seed, offset;
  A scale;  // 1 / (1 - p), rounded to A as the CPU rounds it
};
template <typename A>
__device__ inline AttnDrop<A> AttnDropOf(const GpuAttnDropout& z) {
  AttnDrop<A> d{z.p, z.seed, z.offset, static_cast<A>(1)};
  if (z.key != 0) {
    d.seed = static_cast<unsigned long long>(z.key[0]);
    d.offset = static_cast<unsigned long long>(z.key[1]);
    if (z.key[2] == 0) d.p = 0;
  } else if (z.shift != 0) {
    d.offset += *z.shift;
  }
  if (d.p > 0) d.scale = static_cast<A>(1 / (1 - d.p));
  return d;
}

// Z for query i and key j of pair (bi, hi): 0 or 1 / (1 - p); 1 without dropout or past the end.
template <typename A>
__device__ inline A AttnKeep(const AttnDrop<A>& z, const GpuAttention& p, int64 bi, int64 hi,
                             int64 i, int64 j) {
  if (z.p == 0 || i >= p.tq || j >= p.tk) return static_cast<A>(1);
  const unsigned long long e = attention::DropoutElement(bi, hi, i, j, p.h, p.tq, p.tk);
  return attention::DropoutKeepsAt(z.seed, z.offset, e, z.p) ? z.scale : static_cast<A>(0);
}

// Writes the forward's key (seed, offset + *shift, applied) into rng: one thread.
__global__ void AttnWriteKey(long long* rng, GpuAttnDropout z, int applied) {
  if (GlobalThread() != 0) return;
  rng[0] = static_cast<long long>(z.seed);
  rng[1] = static_cast<long long>(z.offset + (z.shift != 0 ? *z.shift : 0ull));
  rng[2] = applied;
}

// A work item (kernels/attention_tiles.cuh's AttnItems): its (b, h) pair, the first row of its
// tile and the first column of its chunk.
struct AttnItem {
  int64 bi, hi, bh, row0, col0;
};
__device__ inline AttnItem AttnItemOf(const GpuAttention& p, int64 item, int64 rows, int64 cols,
                                      int per_thread) {
  const int64 chunks = AttnChunks(cols, per_thread), tiles = AttnTiles(rows);
  const int64 bh = item / chunks / tiles;
  return {bh / p.h, bh % p.h, bh, (item / chunks) % tiles * kAttnTile,
          (item % chunks) * per_thread * kAttnLanes};
}

// The rows of q, k, v and out_grad (null in the forward) of an item's (b, h) pair.
template <typename T>
struct AttnPair {
  AttnRows<T> q, k, v, dy;
};
template <typename T>
__device__ inline AttnPair<T> AttnPairOf(const GpuAttention& p, const AttnItem& it, const T* q,
                                         const T* k, const T* v, const T* dy) {
  return {AttnRowsOf(q, p.q, it.bi, it.hi, p.tq), AttnRowsOf(k, p.k, it.bi, it.hi, p.tk),
          AttnRowsOf(v, p.v, it.bi, it.hi, p.tk), AttnRowsOf(dy, p.o, it.bi, it.hi, p.tq)};
}

// One query's running maximum m and sum l over the key tiles seen so far; acc (its output
// columns) is rescaled with them.
template <typename A>
struct AttnOnline {
  A m, l;
};

// Folds a key tile's scores s into the row's running max and sum and its weights into w (the
// tile's probabilities up to the common factor exp(-m), times their dropout factors keep);
// rescales acc.
template <int COLS, typename A>
__device__ inline void AttnFold(const A (&s)[kAttnPerLane], const A (&keep)[kAttnPerLane],
                                AttnOnline<A>& run, A (*w)[kAttnPad], A (&acc)[COLS]) {
  const int row = AttnRow(), lane = AttnLane();
  A tile_max = AttnMinusInf<A>();
#pragma unroll
  for (int n = 0; n < kAttnPerLane; ++n) tile_max = s[n] > tile_max ? s[n] : tile_max;
  tile_max = AttnRowMax(tile_max);
  const A m_new = tile_max > run.m ? tile_max : run.m;
  const bool none = m_new == AttnMinusInf<A>();                   // every key so far is masked
  const A alpha = none ? static_cast<A>(1) : Exp(run.m - m_new);  // 0 when nothing was summed
  A sum = 0;
#pragma unroll
  for (int n = 0; n < kAttnPerLane; ++n) {
    const A e = none ? static_cast<A>(0) : AttnProbability(s[n], m_new);
    w[row][lane + kAttnLanes * n] = e * keep[n];
    sum += e;
  }
  run.l = run.l * alpha + AttnRowSum(sum);
  run.m = m_new;
#pragma unroll
  for (int a = 0; a < COLS; ++a) acc[a] *= alpha;
}

// out (B, H, Tq, Dv) and lse (B, H, Tq), stored as req_out and req_lse say (lse by the first
// column chunk). Items: AttnItems(B * H, Tq, Dv, COLS).
template <typename T, typename A, typename M, int COLS>
__global__ void AttnForward(const T* q, const T* k, const T* v, const M* mask, T* out, A* lse,
                            GpuAttention p, GpuAttnDropout dropout, int req_out, int req_lse) {
  __shared__ A xs[kAttnTile][kAttnPad], ys[kAttnTile][kAttnPad], w[kAttnTile][kAttnPad];
  const AttnDrop<A> z = AttnDropOf<A>(dropout);
  const int64 items = AttnItems(p.b * p.h, p.tq, p.dv, COLS);
  for (int64 item = blockIdx.x; item < items; item += gridDim.x) {
    const AttnItem it = AttnItemOf(p, item, p.tq, p.dv, COLS);
    const AttnPair<T> r = AttnPairOf(p, it, q, k, v, static_cast<const T*>(nullptr));
    const int64 i = it.row0 + AttnRow();
    AttnOnline<A> run{AttnMinusInf<A>(), 0};
    A acc[COLS];
#pragma unroll
    for (int a = 0; a < COLS; ++a) acc[a] = 0;
    const int64 key_end = p.causal ? min(p.tk, it.row0 + kAttnTile) : p.tk;
    for (int64 j0 = 0; j0 < key_end; j0 += kAttnTile) {
      A s[kAttnPerLane], keep[kAttnPerLane];
      AttnTileDots(r.q, it.row0, r.k, j0, p.d, xs, ys, s);
#pragma unroll
      for (int n = 0; n < kAttnPerLane; ++n) {
        const int64 j = j0 + AttnLane() + kAttnLanes * n;
        s[n] = AttnScore(p, mask, it.bi, it.hi, i, j, s[n]);
        keep[n] = AttnKeep(z, p, it.bi, it.hi, i, j);
      }
      AttnFold(s, keep, run, w, acc);
      AttnAccumulate<COLS>(w, r.v, j0, p.dv, it.col0, xs, acc);
    }
    if (i >= p.tq) continue;
    const bool empty = run.l == static_cast<A>(0);  // every key masked: out 0, lse -inf
    const A inv = empty ? static_cast<A>(0) : static_cast<A>(1) / run.l;
    T* o = out + it.bi * p.o.b + it.hi * p.o.h + i * p.o.t;
#pragma unroll
    for (int a = 0; a < COLS; ++a) {
      const int64 col = AttnColumn(it.col0, a);
      if (col < p.dv) Store1(o + col, acc[a] * inv, req_out);
    }
    if (it.col0 == 0 && AttnLane() == 0) {
      Store1(lse + it.bh * p.tq + i, empty ? AttnMinusInf<A>() : run.m + Log(run.l), req_lse);
    }
  }
}

// delta[r] = out_grad[r] . out[r] for each of the B * H * Tq rows r = (b * H + h) * Tq + i (out
// and out_grad by out's strides).
template <typename T, typename A>
__global__ void AttnDelta(const T* dy, const T* y, A* delta, GpuAttention p) {
  for (int64 r = GlobalThread(); r < p.b * p.h * p.tq; r += GridThreads()) {
    const int64 bh = r / p.tq;
    const int64 row = bh / p.h * p.o.b + bh % p.h * p.o.h + r % p.tq * p.o.t;
    A sum = 0;
    for (int64 c = 0; c < p.dv; ++c)
      sum += static_cast<A>(ToArith(dy[row + c])) * static_cast<A>(ToArith(y[row + c]));
    delta[r] = sum;
  }
}

// d_q (q's strides) as req says. Items: AttnItems(B * H, Tq, D, COLS).
template <typename T, typename A, typename M, int COLS>
__global__ void AttnQueryGrad(const T* dy, const T* q, const T* k, const T* v, const M* mask,
                              const A* lse, const A* delta, T* dq, GpuAttention p,
                              GpuAttnDropout dropout, int req) {
  __shared__ A xs[kAttnTile][kAttnPad], ys[kAttnTile][kAttnPad], w[kAttnTile][kAttnPad];
  const AttnDrop<A> z = AttnDropOf<A>(dropout);
  const int64 items = AttnItems(p.b * p.h, p.tq, p.d, COLS);
  for (int64 item = blockIdx.x; item < items; item += gridDim.x) {
    const AttnItem it = AttnItemOf(p, item, p.tq, p.d, COLS);
    const AttnPair<T> r = AttnPairOf(p, it, q, k, v, dy);
    const int64 i = it.row0 + AttnRow();
    const A lse_i = i < p.tq ? lse[it.bh * p.tq + i] : AttnMinusInf<A>();
    const A delta_i = i < p.tq ? delta[it.bh * p.tq + i] : static_cast<A>(0);
    A acc[COLS];
#pragma unroll
    for (int a = 0; a < COLS; ++a) acc[a] = 0;
    const int64 key_end = p.causal ? min(p.tk, it.row0 + kAttnTile) : p.tk;
    for (int64 j0 = 0; j0 < key_end; j0 += kAttnTile) {
      A s[kAttnPerLane], dp[kAttnPerLane];
      AttnTileDots(r.q, it.row0, r.k, j0, p.d, xs, ys, s);
      AttnTileDots(r.dy, it.row0, r.v, j0, p.dv, xs, ys, dp);
#pragma unroll
      for (int n = 0; n < kAttnPerLane; ++n) {
        const int64 j = j0 + AttnLane() + kAttnLanes * n;
        const A pr = AttnProbability(AttnScore(p, mask, it.bi, it.hi, i, j, s[n]), lse_i);
        const A keep = AttnKeep(z, p, it.bi, it.hi, i, j);
        w[AttnRow()][AttnLane() + kAttnLanes * n] =
            pr == static_cast<A>(0) ? static_cast<A>(0) : pr * (keep * dp[n] - delta_i);
      }
      AttnAccumulate<COLS>(w, r.k, j0, p.d, it.col0, xs, acc);
    }
    if (i >= p.tq) continue;
    T* out = dq + it.bi * p.q.b + it.hi * p.q.h + i * p.q.t;
    const A scale = static_cast<A>(p.scale);
#pragma unroll
    for (int a = 0; a < COLS; ++a) {
      const int64 col = AttnColumn(it.col0, a);
      if (col < p.d) Store1(out + col, scale * acc[a], req);
    }
  }
}

// d_k (k's strides) and d_v (v's strides) as req_dk and req_dv say. Items:
// AttnItems(B * H, Tk, max(D, Dv), COLS). The tile's rows are keys; s, P and dS are indexed
// [key][query] here.
template <typename T, typename A, typename M, int COLS>
__global__ void AttnKeyGrad(const T* dy, const T* q, const T* k, const T* v, const M* mask,
                            const A* lse, const A* delta, T* dk, T* dv, GpuAttention p,
                            GpuAttnDropout dropout, int req_dk, int req_dv) {
  __shared__ A xs[kAttnTile][kAttnPad], ys[kAttnTile][kAttnPad];
  const AttnDrop<A> z = AttnDropOf<A>(dropout);
  __shared__ A wp[kAttnTile][kAttnPad], wds[kAttnTile][kAttnPad];
  const int64 cols = p.d > p.dv ? p.d : p.dv;
  const int64 items = AttnItems(p.b * p.h, p.tk, cols, COLS);
  for (int64 item = blockIdx.x; item < items; item += gridDim.x) {
    const AttnItem it = AttnItemOf(p, item, p.tk, cols, COLS);
    const AttnPair<T> r = AttnPairOf(p, it, q, k, v, dy);
    const int64 j = it.row0 + AttnRow();
    A acc_k[COLS], acc_v[COLS];
#pragma unroll
    for (int a = 0; a < COLS; ++a) acc_k[a] = acc_v[a] = 0;
    // Causal: queries before the tile's first key see none of its keys.
    for (int64 i0 = p.causal ? it.row0 : 0; i0 < p.tq; i0 += kAttnTile) {
      A s[kAttnPerLane], dp[kAttnPerLane];
      AttnTileDots(r.k, it.row0, r.q, i0, p.d, xs, ys, s);
      AttnTileDots(r.v, it.row0, r.dy, i0, p.dv, xs, ys, dp);
#pragma unroll
      for (int n = 0; n < kAttnPerLane; ++n) {
        const int64 i = i0 + AttnLane() + kAttnLanes * n;
        const A lse_i = i < p.tq ? lse[it.bh * p.tq + i] : AttnMinusInf<A>();
        const A pr = AttnProbability(AttnScore(p, mask, it.bi, it.hi, i, j, s[n]), lse_i);
        const A keep = AttnKeep(z, p, it.bi, it.hi, i, j);
        wp[AttnRow()][AttnLane() + kAttnLanes * n] = pr * keep;
        wds[AttnRow()][AttnLane() + kAttnLanes * n] =
            pr == static_cast<A>(0) ? static_cast<A>(0)
                                    : pr * (keep * dp[n] - delta[it.bh * p.tq + i]);
      }
      AttnAccumulate<COLS>(wp, r.dy, i0, p.dv, it.col0, xs, acc_v);
      AttnAccumulate<COLS>(wds, r.q, i0, p.d, it.col0, xs, acc_k);
    }
    if (j >= p.tk) continue;
    T* out_k = dk + it.bi * p.k.b + it.hi * p.k.h + j * p.k.t;
    T* out_v = dv + it.bi * p.v.b + it.hi * p.v.h + j * p.v.t;
    const A scale = static_cast<A>(p.scale);
#pragma unroll
    for (int a = 0; a < COLS; ++a) {
      const int64 col = AttnColumn(it.col0, a);
      if (col < p.d) Store1(out_k + col, scale * acc_k[a], req_dk);
      if (col < p.dv) Store1(out_v + col, acc_v[a], req_dv);
    }
  }
}

}  // namespace weft
