// CPU compute of Attention and _backward_Attention (ops/nn/attention.cc says what they compute):
// flash attention's tiled algorithm in plain loops, one kernel templated on the storage type T:
// float32 and float64 compute in T; bfloat16 loads into float32, computes and keeps lse in float32
// and rounds each output once. Every operand is read through its row strides (AttentionRows), so
// the layouts (B, H, T, D) and packed qkv (B, T, 3, H, D) run the same loops.
//
// Forward: each (b, h) pair's queries in blocks of kQueryBlock rows; for each block the keys in
// blocks of kKeyBlock, with a running maximum m and sum l per row (online softmax): a new key
// block rescales what was summed by exp(m_old - m_new). Memory is one scores tile, one dropout
// tile, one accumulator tile and m, l per thread: never Tq x Tk. Dropout multiplies a probability
// by its tile entry (0 or 1 / (1 - p)) where it meets v; l sums the probabilities before dropout.
// A scores tile is a product with the key block transposed (TileProduct: sums of rows along the
// keys, in vectors), not a dot product per pair. Every product (scores, P v, dS k, P^T dy, dS^T q)
// sums four output rows at once (AccumulateRowBlock), so each row it reads is loaded once for
// four: 1.5x the older row-at-a-time loops on a causal B 8, H 8, T 256, D 64 forward and backward.
// Backward, recomputing each probability tile as P = exp(s - lse) (0 where s = -inf) and each
// dropout tile from the forward's key (rng):
//   1. D_i = out_grad[i] . out[i] per row (a workspace of B * H * Tq values);
//   2. per (b, h) pair, one thread: for each key block, against each query block that sees it,
//      the scores and dP = out_grad v^T as tiles, dS = P (Z dP - D), then d_v += (P Z)^T out_grad
//      and d_k += dS^T q into the key block's accumulators and d_q += dS k into the head's, which
//      is stored once its key blocks are done (flash attention 2's order, with no atomics: the
//      head is one thread's).
// Each output row is summed by one thread in a fixed order, so the results do not depend on the
// thread count. Causal attention skips the tiles above the diagonal. Row updates run along D,
// which is contiguous, in loops marked for SIMD, in the widest vectors the processor has
// (WEFT_CPU_VECTOR_CLONES).
#include "ops/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/bfloat16.h"
#include "core/philox.h"
#include "ops/attrs.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/math/attention_dropout.h"
#include "ops/math/base.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

constexpr int64_t kQueryBlock = 32;
constexpr int64_t kKeyBlock = 64;

// ---- Storage and arithmetic types ----

// What T computes in (ArithOf: float for bfloat16, else T) and loads (ToArith): cpu_util.h.

// out[0, n) = f(c), or += with kAddTo, rounded once into T.
template <typename T, typename F>
void StoreRow(T* out, OpReq req, int64_t n, F&& f) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (req == OpReq::kNull) return;
    const bool add = req == OpReq::kAddTo;
    for (int64_t c = 0; c < n; ++c)
      out[c] = BFloat16::FromFloat(add ? out[c].ToFloat() + f(c) : f(c));
  } else {
    StoreRange(out, req, 0, n, f);
  }
}

template <typename T>
inline ArithOf<T> Dot(const T* a, const T* b, int64_t n) {
  ArithOf<T> sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += ToArith(a[i]) * ToArith(b[i]);
  return sum;
}

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// out[0, n) += sum over j < count of w[j * w_stride] * rows[j * stride + (0, n)]: a weighted sum
// of rows (one row of a matrix product), kChunk columns at a time summed in registers across the
// rows, so each chunk of out is loaded and stored once, not once per row. Zero weights are skipped.
template <typename A, typename W, typename T>
WEFT_CPU_VECTOR_CLONES void AccumulateRows(const W* w, int64_t w_stride, int64_t count,
                                           const T* rows, int64_t stride, int64_t n, A* out) {
  constexpr int64_t kChunk = 32;
  int64_t c0 = 0;
  for (; c0 + kChunk <= n; c0 += kChunk) {
    A acc[kChunk] = {};
    for (int64_t j = 0; j < count; ++j) {
      const A a = ToArith(w[j * w_stride]);
      if (a == 0) continue;
      const T* row = rows + j * stride + c0;
#pragma omp simd
      for (int64_t e = 0; e < kChunk; ++e) acc[e] += a * ToArith(row[e]);
    }
#pragma omp simd
    for (int64_t e = 0; e < kChunk; ++e) out[c0 + e] += acc[e];
  }
  for (int64_t j = 0; c0 < n && j < count; ++j) {
    const A a = ToArith(w[j * w_stride]);
    if (a == 0) continue;
    const T* row = rows + j * stride;
#pragma omp simd
    for (int64_t e = c0; e < n; ++e) out[e] += a * ToArith(row[e]);
  }
}

// For r in [0, 4): out[r * out_next + (0, n)] += sum over j < count of
// w[r * w_next + j * w_stride] * rows[j * stride + (0, n)]: four rows of a matrix product at once,
// each loaded row of `rows` used four times from registers (AccumulateRows uses it once). Each
// output element sums its terms in the order AccumulateRows does, so the results are the same.
template <typename A, typename W, typename T>
WEFT_CPU_VECTOR_CLONES void AccumulateFourRows(const W* w, int64_t w_next, int64_t w_stride,
                                               int64_t count, const T* rows, int64_t stride,
                                               int64_t n, A* out, int64_t out_next) {
  constexpr int64_t kChunk = 32;
  int64_t c0 = 0;
  for (; c0 + kChunk <= n; c0 += kChunk) {
    A acc0[kChunk] = {}, acc1[kChunk] = {}, acc2[kChunk] = {}, acc3[kChunk] = {};
    for (int64_t j = 0; j < count; ++j) {
      const W* wj = w + j * w_stride;
      const A a0 = ToArith(wj[0]), a1 = ToArith(wj[w_next]), a2 = ToArith(wj[2 * w_next]),
              a3 = ToArith(wj[3 * w_next]);
      if (a0 == 0 && a1 == 0 && a2 == 0 && a3 == 0) continue;
      const T* row = rows + j * stride + c0;
#pragma omp simd
      for (int64_t e = 0; e < kChunk; ++e) {
        const A x = ToArith(row[e]);
        acc0[e] += a0 * x;
        acc1[e] += a1 * x;
        acc2[e] += a2 * x;
        acc3[e] += a3 * x;
      }
    }
#pragma omp simd
    for (int64_t e = 0; e < kChunk; ++e) {
      out[c0 + e] += acc0[e];
      out[out_next + c0 + e] += acc1[e];
      out[2 * out_next + c0 + e] += acc2[e];
      out[3 * out_next + c0 + e] += acc3[e];
    }
  }
  if (c0 == n) return;
  for (int64_t r = 0; r < 4; ++r) {  // the last columns, a row at a time
    A* o = out + r * out_next;
    for (int64_t j = 0; j < count; ++j) {
      const A a = ToArith(w[r * w_next + j * w_stride]);
      if (a == 0) continue;
      const T* row = rows + j * stride;
#pragma omp simd
      for (int64_t e = c0; e < n; ++e) o[e] += a * ToArith(row[e]);
    }
  }
}

// AccumulateFourRows for m rows: out row r (out_next apart) += the sum over j < count of
// w[r * w_next + j * w_stride] * rows[j * stride + (0, n)], four rows at a time.
template <typename A, typename W, typename T>
void AccumulateRowBlock(const W* w, int64_t w_next, int64_t w_stride, int64_t m, int64_t count,
                        const T* rows, int64_t stride, int64_t n, A* out, int64_t out_next) {
  int64_t r = 0;
  for (; r + 4 <= m; r += 4) {
    AccumulateFourRows(w + r * w_next, w_next, w_stride, count, rows, stride, n, out + r * out_next,
                       out_next);
  }
  for (; r < m; ++r)
    AccumulateRows(w + r * w_next, w_stride, count, rows, stride, n, out + r * out_next);
}

// ---- The operands ----

// The forward's operands of one call, read through d's rows; the mask additive (T) or boolean
// (nonzero: the key takes part), read as AttentionDims::MaskAt places it; both null without one.
template <typename T>
struct Operands {
  const AttentionDims& d;
  const T *q, *k, *v;
  const T* mask_add;
  const uint8_t* mask_bool;
};

// One (b, h) pair's rows of q, k and v.
template <typename T>
struct Head {
  int64_t b, h;
  const T *q, *k, *v;
  int64_t qt, kt, vt;  // row strides along T
  const T* Q(int64_t i) const { return q + i * qt; }
  const T* K(int64_t j) const { return k + j * kt; }
  const T* V(int64_t j) const { return v + j * vt; }
};

template <typename T>
Head<T> HeadOf(const Operands<T>& x, int64_t bh) {
  const AttentionDims& d = x.d;
  const int64_t b = bh / d.h, h = bh % d.h;
  return {b,     h,    x.q + d.q.At(b, h, 0), x.k + d.k.At(b, h, 0), x.v + d.v.At(b, h, 0), d.q.t,
          d.k.t, d.v.t};
}

// Dropout of one call: none when p is 0.
struct Dropout {
  double p = 0;
  uint64_t seed = 0, offset = 0;  // the op's random range (storage/random.h)
};

// A block of rows [first, last) of (b, h) pair bh.
struct Block {
  int64_t bh, first, last;
};

// Work item `item` of blocks of `size` rows over `rows` rows per (b, h) pair.
Block BlockOf(int64_t item, int64_t size, int64_t rows) {
  const int64_t per_head = (rows + size - 1) / size;
  const int64_t first = (item % per_head) * size;
  return {item / per_head, first, std::min(first + size, rows)};
}

int64_t Blocks(const AttentionDims& d, int64_t size, int64_t rows) {
  return d.Heads() * ((rows + size - 1) / size);
}

// ---- Tiles ----

// t (n x kKeyBlock, its first `count` columns) = `count` rows (`stride` apart, n values each, from
// `first`) transposed, in A: a key block's k or v laid out so that products run along the keys.
template <typename T>
void TransposeTile(const T* first, int64_t stride, int64_t count, int64_t n, ArithOf<T>* t) {
  for (int64_t j = 0; j < count; ++j) {
    for (int64_t c = 0; c < n; ++c) t[c * kKeyBlock + j] = ToArith(first[j * stride + c]);
  }
}

// `count` rows (`stride` apart, n values each, from `first`) in A, and their stride: the rows
// themselves when T computes in T, else widened once into `buf` (count x n), so that the products
// that read each row many times (once per query or key of a tile) read floats.
template <typename T>
std::pair<const ArithOf<T>*, int64_t> RowsInArith(const T* first, int64_t stride, int64_t count,
                                                  int64_t n, std::vector<ArithOf<T>>& buf) {
  if constexpr (std::is_same_v<T, ArithOf<T>>) {
    return {first, stride};
  } else {
    for (int64_t j = 0; j < count; ++j) WidenBf16(first + j * stride, buf.data() + j * n, n);
    return {buf.data(), n};
  }
}

// out (rows x kKeyBlock, first `cols` columns) = A B^T for A's `rows` rows (from `a`, `stride`
// apart, n values each) and B^T as bt (TransposeTile's): a row of out is a weighted sum of rows
// of bt (AccumulateRowBlock), in vectors along the keys.
template <typename T>
void TileProduct(const T* a, int64_t stride, int64_t rows, int64_t n, const ArithOf<T>* bt,
                 int64_t cols, ArithOf<T>* out) {
  for (int64_t i = 0; i < rows; ++i) std::fill_n(out + i * kKeyBlock, cols, ArithOf<T>(0));
  AccumulateRowBlock(a, stride, 1, rows, n, bt, kKeyBlock, cols, out, kKeyBlock);
}

// s (rows x kKeyBlock, row stride kKeyBlock) = the scores of queries [i0, i1) and keys [j0, j1),
// with the scale, the mask and causality; kt: the keys' TransposeTile.
template <typename T>
void ScoreTile(const Operands<T>& x, const Head<T>& hd, const ArithOf<T>* kt, int64_t i0,
               int64_t i1, int64_t j0, int64_t j1, ArithOf<T>* s) {
  using A = ArithOf<T>;
  const AttentionDims& d = x.d;
  TileProduct(hd.Q(i0), hd.qt, i1 - i0, d.d, kt, j1 - j0, s);
  const A scale = static_cast<A>(d.scale), minus_inf = static_cast<A>(kMinusInf);
  for (int64_t i = i0; i < i1; ++i) {
    A* row = s + (i - i0) * kKeyBlock;
    for (int64_t j = j0; j < j1; ++j) {
      A v = scale * row[j - j0];
      if (x.mask_add) v += ToArith(x.mask_add[d.MaskAt(hd.b, hd.h, i, j)]);
      if (x.mask_bool && !x.mask_bool[d.MaskAt(hd.b, hd.h, i, j)]) v = minus_inf;
      row[j - j0] = d.causal && j > i ? minus_inf : v;
    }
  }
}

// keep (rows x kKeyBlock, as Scores) = 1 / (1 - p) where the dropout keeps (i, j), else 0
// (ops/math/attention_dropout.h: one Philox block per four elements along a row).
template <typename A>
void KeepTile(const AttentionDims& d, const Dropout& z, int64_t b, int64_t h, int64_t i0,
              int64_t i1, int64_t j0, int64_t j1, A* keep) {
  const A scale = static_cast<A>(1 / (1 - z.p));
  for (int64_t i = i0; i < i1; ++i) {
    A* row = keep + (i - i0) * kKeyBlock;
    uint64_t block = ~uint64_t{0};
    PhiloxBlock bits{};
    for (int64_t j = j0; j < j1; ++j) {
      const uint64_t e = attention::DropoutElement(b, h, i, j, d.h, d.tq, d.tk);
      if (attention::DropoutBlock(e) != block) {
        block = attention::DropoutBlock(e);
        bits = PhiloxBlockAt(z.seed, z.offset + block);
      }
      row[j - j0] = attention::DropoutKeepsIn(bits, e, z.p) ? scale : A(0);
    }
  }
}

// The scores tile (kt: the keys' TransposeTile), and the dropout tile when z drops (else `keep`
// is left alone and the callers read no tile).
template <typename T>
const ArithOf<T>* Tiles(const Operands<T>& x, const Head<T>& hd, const Dropout& z, int64_t i0,
                        int64_t i1, int64_t j0, int64_t j1, const ArithOf<T>* kt, ArithOf<T>* s,
                        ArithOf<T>* keep) {
  ScoreTile(x, hd, kt, i0, i1, j0, j1, s);
  if (z.p == 0) return nullptr;
  KeepTile(x.d, z, hd.b, hd.h, i0, i1, j0, j1, keep);
  return keep;
}

// The last key block a query block [i0, i1) reads: causal attention stops at the diagonal.
int64_t KeyEnd(const AttentionDims& d, int64_t i1) { return d.causal ? std::min(d.tk, i1) : d.tk; }

// ---- Forward ----

// Per thread: the scores and dropout tiles, the output accumulators and the running maximum and
// sum per row.
template <typename A>
struct ForwardScratch {
  explicit ForwardScratch(const AttentionDims& d)
      : kt(d.d * kKeyBlock),
        s(kQueryBlock * kKeyBlock),
        keep(kQueryBlock * kKeyBlock),
        acc(kQueryBlock * d.dv),
        m(kQueryBlock),
        l(kQueryBlock),
        v(kKeyBlock * d.dv) {}
  std::vector<A> kt, s, keep, acc, m, l;
  std::vector<A> v;  // a key block's values in A (RowsInArith), for bfloat16
};

// Folds `cols` keys into row r's running maximum and sum, and rescales its accumulator to the
// new maximum; s: the row's scores, overwritten with their exponentials times `keep` (null: all
// kept), the row's dropout factors: the weights of the keys' values, which the caller then adds
// into the accumulators of a block of rows at once.
template <typename A>
WEFT_CPU_VECTOR_CLONES void OnlineSoftmaxRow(int64_t dv, int64_t cols, A* s, const A* keep,
                                             ForwardScratch<A>& w, int64_t r) {
  A max = static_cast<A>(kMinusInf);
  for (int64_t c = 0; c < cols; ++c) max = std::max(max, s[c]);
  const A m_new = std::max(w.m[r], max);
  if (m_new == static_cast<A>(kMinusInf)) {  // every key so far is masked: no weight
    std::fill_n(s, cols, A(0));
    return;
  }
  const A alpha = std::exp(w.m[r] - m_new);  // 0 when nothing was summed yet
  A* acc = w.acc.data() + r * dv;
  for (int64_t c = 0; c < dv; ++c) acc[c] *= alpha;
  A sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < cols; ++c) {
    s[c] = math::Exp(s[c] - m_new);  // 0 for a masked key
    sum += s[c];
  }
  if (keep != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) s[c] *= keep[c];
  }
  w.l[r] = w.l[r] * alpha + sum;
  w.m[r] = m_new;
}

// out and lse of one query block, stored as the requests say.
template <typename T>
void ForwardBlock(const Operands<T>& x, const Dropout& z, const Block& blk,
                  ForwardScratch<ArithOf<T>>& w, std::span<const OpReq> req, T* out,
                  ArithOf<T>* lse) {
  using A = ArithOf<T>;
  const AttentionDims& d = x.d;
  const Head<T> hd = HeadOf(x, blk.bh);
  const int64_t rows = blk.last - blk.first;
  std::fill_n(w.acc.begin(), rows * d.dv, A(0));
  std::fill_n(w.m.begin(), rows, static_cast<A>(kMinusInf));
  std::fill_n(w.l.begin(), rows, A(0));
  for (int64_t j0 = 0; j0 < KeyEnd(d, blk.last); j0 += kKeyBlock) {
    const int64_t j1 = std::min(j0 + kKeyBlock, d.tk);
    TransposeTile(hd.K(j0), hd.kt, j1 - j0, d.d, w.kt.data());
    const A* keep =
        Tiles(x, hd, z, blk.first, blk.last, j0, j1, w.kt.data(), w.s.data(), w.keep.data());
    const auto [v, vt] = RowsInArith(hd.V(j0), hd.vt, j1 - j0, d.dv, w.v);
    for (int64_t r = 0; r < rows; ++r) {
      OnlineSoftmaxRow(d.dv, j1 - j0, w.s.data() + r * kKeyBlock,
                       keep ? keep + r * kKeyBlock : nullptr, w, r);
    }
    AccumulateRowBlock(w.s.data(), kKeyBlock, 1, rows, j1 - j0, v, vt, d.dv, w.acc.data(), d.dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = blk.first + r;
    const bool empty = w.l[r] == 0;  // every key masked: out 0, lse -inf
    const A inv = empty ? A(0) : 1 / w.l[r];
    const A* acc = w.acc.data() + r * d.dv;
    StoreRow(out + d.out.At(hd.b, hd.h, i), AsWrite(req[0]), d.dv,
             [&](int64_t c) { return acc[c] * inv; });
    Store(lse[blk.bh * d.tq + i], AsWrite(req[1]),
          empty ? static_cast<A>(kMinusInf) : w.m[r] + std::log(w.l[r]));
  }
}

// out and lse of every query block.
template <typename T>
void ForwardLoops(const Operands<T>& x, const Dropout& z, std::span<const OpReq> req, T* out,
                  ArithOf<T>* lse) {
  const int64_t block_work = std::min(kQueryBlock, x.d.tq) * x.d.tk * (x.d.d + x.d.dv);
  ParallelFor(Blocks(x.d, kQueryBlock, x.d.tq), GrainFor(block_work),
              [&](int64_t begin, int64_t end) {
                ForwardScratch<ArithOf<T>> w(x.d);
                for (int64_t item = begin; item < end; ++item)
                  ForwardBlock(x, z, BlockOf(item, kQueryBlock, x.d.tq), w, req, out, lse);
              });
}

// ---- Backward ----

// What the backward reads besides the operands: out_grad and out (out's rows), lse and D (BH, Tq).
template <typename T>
struct Grads {
  const T *dy, *y;
  const ArithOf<T>* lse;
  ArithOf<T>* delta;  // D_i = dy[i] . y[i], computed first
  const T* Dy(const AttentionDims& d, const Head<T>& hd, int64_t i) const {
    return dy + d.out.At(hd.b, hd.h, i);
  }
};

// Where the backward writes: the gradients of q, k and v, each with its operand's rows (packed:
// three parts of one array) and its request.
template <typename T>
struct GradOutputs {
  T *dq, *dk, *dv;
  OpReq req[3];
};

// Per thread: one key block's k and v (transposed, and k's rows), a (query, key) tile pair of
// scores and probabilities, the key block's accumulators and a head's d_q.
template <typename A>
struct BackwardScratch {
  explicit BackwardScratch(const AttentionDims& d)
      : kt(d.d * kKeyBlock),
        vt(d.dv * kKeyBlock),
        k(kKeyBlock * d.d),
        s(kQueryBlock * kKeyBlock),
        p(kQueryBlock * kKeyBlock),
        keep(kQueryBlock * kKeyBlock),
        dk(kKeyBlock * d.d),
        dv(kKeyBlock * d.dv),
        dq(d.tq * d.d),
        dy(kQueryBlock * d.dv),
        q(kQueryBlock * d.d) {}
  std::vector<A> kt, vt, k, s, p, keep, dk, dv, dq;
  std::vector<A> dy, q;  // a query block's out_grad and q in A (RowsInArith), for bfloat16
};

// For query row i of a tile pair, from its scores s (overwritten with dS) and dP = dy[i] v^T
// (overwritten with P Z, the probabilities after dropout): P = exp(s - lse) (0 for a masked key),
// dS = P (Z dP - D_i); `keep` the row's dropout factors Z (null: all 1).
template <typename A>
WEFT_CPU_VECTOR_CLONES void ScoreGradRow(A lse, A delta, const A* keep, int64_t cols, A* s, A* dp) {
  if (keep != nullptr) {
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      const A p = math::Exp(s[j] - lse);
      s[j] = p * (keep[j] * dp[j] - delta);
      dp[j] = p * keep[j];
    }
  } else {
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) {
      const A p = math::Exp(s[j] - lse);
      s[j] = p * (dp[j] - delta);
      dp[j] = p;
    }
  }
}

// The (query block [i0, i1), key block) pair's share of d_q (a head's, in w.dq), d_k and d_v (the
// key block's, in w.dk and w.dv): with the tiles dS and P Z of every row first, dQ_i += dS_i k per
// query, then dV_j += (P Z)_j^T dy and dK_j += dS_j^T q per key (AccumulateRowBlock: sums in
// registers, four rows at a time). w.kt, w.vt and w.k hold the key block's keys and values.
template <typename T>
void TilePairGrads(const Operands<T>& x, const Dropout& z, const Grads<T>& g, const Head<T>& hd,
                   int64_t bh, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                   BackwardScratch<ArithOf<T>>& w) {
  using A = ArithOf<T>;
  const AttentionDims& d = x.d;
  const int64_t cols = j1 - j0, rows = i1 - i0, dy_t = d.out.t;
  const A* keep = Tiles(x, hd, z, i0, i1, j0, j1, w.kt.data(), w.s.data(), w.keep.data());
  TileProduct(g.Dy(d, hd, i0), dy_t, rows, d.dv, w.vt.data(), cols, w.p.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = bh * d.tq + i0 + r;
    A *ds = w.s.data() + r * kKeyBlock, *pz = w.p.data() + r * kKeyBlock;
    if (g.lse[row] == static_cast<A>(kMinusInf)) {  // every key masked: P is 0
      std::fill_n(ds, cols, A(0));
      std::fill_n(pz, cols, A(0));
      continue;
    }
    ScoreGradRow(g.lse[row], g.delta[row], keep ? keep + r * kKeyBlock : nullptr, cols, ds, pz);
  }
  AccumulateRowBlock(w.s.data(), kKeyBlock, 1, rows, cols, w.k.data(), d.d, d.d,
                     w.dq.data() + i0 * d.d, d.d);
  const auto [dy, dy_stride] = RowsInArith(g.Dy(d, hd, i0), dy_t, rows, d.dv, w.dy);
  const auto [q, q_stride] = RowsInArith(hd.Q(i0), hd.qt, rows, d.d, w.q);
  AccumulateRowBlock(w.p.data(), 1, kKeyBlock, cols, rows, dy, dy_stride, d.dv, w.dv.data(), d.dv);
  AccumulateRowBlock(w.s.data(), 1, kKeyBlock, cols, rows, q, q_stride, d.d, w.dk.data(), d.d);
}

// Every gradient of head bh, its key blocks in order (each against the query blocks that see it),
// d_q summed over them in the scratch: one thread per head, so no two threads write one row.
template <typename T>
void HeadGrads(const Operands<T>& x, const Dropout& z, const Grads<T>& g, int64_t bh,
               BackwardScratch<ArithOf<T>>& w, const GradOutputs<T>& out) {
  using A = ArithOf<T>;
  const AttentionDims& d = x.d;
  const Head<T> hd = HeadOf(x, bh);
  const A scale = static_cast<A>(d.scale);
  std::fill_n(w.dq.begin(), d.tq * d.d, A(0));
  for (int64_t j0 = 0; j0 < d.tk; j0 += kKeyBlock) {
    const int64_t j1 = std::min(j0 + kKeyBlock, d.tk), cols = j1 - j0;
    TransposeTile(hd.K(j0), hd.kt, cols, d.d, w.kt.data());
    TransposeTile(hd.V(j0), hd.vt, cols, d.dv, w.vt.data());
    for (int64_t j = 0; j < cols; ++j) {
      if constexpr (std::is_same_v<T, A>) {
        std::copy_n(hd.K(j0 + j), d.d, w.k.data() + j * d.d);
      } else {
        WidenBf16(hd.K(j0 + j), w.k.data() + j * d.d, d.d);
      }
    }
    std::fill_n(w.dk.begin(), cols * d.d, A(0));
    std::fill_n(w.dv.begin(), cols * d.dv, A(0));
    // causal: queries before j0 see none of these keys
    for (int64_t i0 = d.causal ? j0 / kQueryBlock * kQueryBlock : 0; i0 < d.tq; i0 += kQueryBlock)
      TilePairGrads(x, z, g, hd, bh, i0, std::min(i0 + kQueryBlock, d.tq), j0, j1, w);
    for (int64_t j = 0; j < cols; ++j) {
      const A *dk = w.dk.data() + j * d.d, *dv = w.dv.data() + j * d.dv;
      StoreRow(out.dk + d.k.At(hd.b, hd.h, j0 + j), out.req[1], d.d,
               [&](int64_t c) { return dk[c] * scale; });
      StoreRow(out.dv + d.v.At(hd.b, hd.h, j0 + j), out.req[2], d.dv,
               [&](int64_t c) { return dv[c]; });
    }
  }
  for (int64_t i = 0; i < d.tq; ++i) {
    const A* dq = w.dq.data() + i * d.d;
    StoreRow(out.dq + d.q.At(hd.b, hd.h, i), out.req[0], d.d,
             [&](int64_t c) { return dq[c] * scale; });
  }
}

// D_i = dy[i] . y[i] for every row, into g.delta.
template <typename T>
void RowDeltas(const AttentionDims& d, const Grads<T>& g) {
  ParallelFor(d.Heads() * d.tq, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t bh = row / d.tq, at = d.out.At(bh / d.h, bh % d.h, row % d.tq);
      g.delta[row] = Dot(g.dy + at, g.y + at, d.dv);
    }
  });
}

template <typename T>
void BackwardLoops(const Operands<T>& x, const Dropout& z, const Grads<T>& g,
                   const GradOutputs<T>& out) {
  const AttentionDims& d = x.d;
  RowDeltas(d, g);
  // A head's work: every (query, key) pair's score, dP and three updates.
  const int64_t head_work = d.tq * d.tk * (2 * d.d + 3 * d.dv);
  ParallelFor(d.Heads(), GrainFor(head_work), [&](int64_t begin, int64_t end) {
    BackwardScratch<ArithOf<T>> w(d);
    for (int64_t bh = begin; bh < end; ++bh) HeadGrads(x, z, g, bh, w, out);
  });
}

// ---- compute ----

// The dims and operands of a call whose forward inputs start at in[first].
template <typename T>
Operands<T> OperandsOf(const AttentionDims& d, const AttentionSlots& s,
                       std::span<const TensorView> in, int first, int mask) {
  const T* q = static_cast<const T*>(in[first].raw());
  Operands<T> x{d, q, q, q, nullptr, nullptr};
  if (s.operands == 3) {
    x.k = static_cast<const T*>(in[first + 1].raw());
    x.v = static_cast<const T*>(in[first + 2].raw());
  }
  if (mask >= 0 && AttentionMaskIsBoolean(in[mask].dtype()))
    x.mask_bool = static_cast<const uint8_t*>(in[mask].raw());
  else if (mask >= 0)
    x.mask_add = static_cast<const T*>(in[mask].raw());
  return x;
}

AttentionDims DimsOf(const char* op, const AttentionParam& p, const AttentionSlots& s,
                     std::span<const TensorView> in, int first, int mask) {
  std::vector<Shape> shapes;
  for (int i = 0; i < s.operands; ++i) shapes.push_back(in[first + i].shape());
  if (mask >= 0) shapes.push_back(in[mask].shape());
  return AttentionDimsOf(op, p, shapes);
}

// Runs f.operator()<T>() for the data's dtype.
template <typename F>
void DataTypeSwitch(const char* op, DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      return f.template operator()<float>();
    case DType::kFloat64:
      return f.template operator()<double>();
    case DType::kBFloat16:
      return f.template operator()<BFloat16>();
    default:
      WEFT_THROW(op << ": expected float32, float64 or bfloat16 data, found " << t);
  }
}

// The forward's dropout: the op's range in training with p > 0, written to the rng output (if
// any, and requested) for the backward.
Dropout ForwardDropout(const OpContext& ctx, const AttentionParam& p, const AttentionSlots& s,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
  const bool on = ctx.is_train && p.p > 0;
  if (s.rng >= 0 && req[s.rng] != OpReq::kNull) {
    int64_t* rng = out[s.rng].data<int64_t>();
    rng[kAttentionRngSeed] = static_cast<int64_t>(ctx.random.seed);
    rng[kAttentionRngOffset] = static_cast<int64_t>(ctx.random.offset);
    rng[kAttentionRngApplied] = on ? 1 : 0;
  }
  if (!on) return {};
  return {p.p, ctx.random.seed, ctx.random.offset};
}

void AttentionForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  const AttentionParam& p = a.Get<AttentionParam>();
  const AttentionSlots s = AttentionSlotsOf(p);
  const AttentionDims d = DimsOf("Attention", p, s, in, 0, s.mask);
  const Dropout z = ForwardDropout(ctx, p, s, req, out);
  DataTypeSwitch("Attention", in[0].dtype(), [&]<typename T>() {
    ForwardLoops(OperandsOf<T>(d, s, in, 0, s.mask), z, req, static_cast<T*>(out[0].raw()),
                 static_cast<ArithOf<T>*>(out[1].raw()));
  });
}

// The backward's dropout: the forward's, read from its rng output.
Dropout BackwardDropout(const AttentionParam& p, const AttentionSlots& s,
                        std::span<const TensorView> in) {
  if (s.rng < 0) return {};
  const int64_t* rng = in[s.Rng()].data<int64_t>();
  if (rng[kAttentionRngApplied] == 0) return {};
  return {p.p, static_cast<uint64_t>(rng[kAttentionRngSeed]),
          static_cast<uint64_t>(rng[kAttentionRngOffset])};
}

void AttentionBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
  const char* op = "_backward_Attention";
  const AttentionParam& p = a.Get<AttentionParam>();
  const AttentionSlots s = AttentionSlotsOf(p);
  const AttentionDims d = DimsOf(op, p, s, in, s.Operand(0), s.Mask());
  const Dropout z = BackwardDropout(p, s, in);
  DataTypeSwitch(op, in[s.Operand(0)].dtype(), [&]<typename T>() {
    using A = ArithOf<T>;
    const Grads<T> g{static_cast<const T*>(in[s.kOutGrad].raw()),
                     static_cast<const T*>(in[s.Out()].raw()),
                     static_cast<const A*>(in[s.Lse()].raw()),
                     static_cast<A*>(ctx.Workspace(d.Heads() * d.tq * sizeof(A)))};
    const int last = s.operands - 1;  // packed: every gradient is a part of output 0
    GradOutputs<T> o{static_cast<T*>(out[0].raw()), static_cast<T*>(out[std::min(1, last)].raw()),
                     static_cast<T*>(out[last].raw())};
    for (int i = 0; i < 3; ++i) o.req[i] = AsWrite(req[std::min(i, last)]);
    BackwardLoops(OperandsOf<T>(d, s, in, s.Operand(0), s.Mask()), z, g, o);
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"Attention", {.compute = AttentionForward}},
                               {"_backward_Attention", {.compute = AttentionBackward}},
                           });

}  // namespace
}  // namespace weft::cpu
