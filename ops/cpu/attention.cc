// CPU compute of Attention and _backward_Attention (ops/nn/attention.cc says what they compute):
// flash attention's tiled algorithm in plain loops, float32 (float accumulators, lse in float) and
// float64. bfloat16 is an error for now.
//
// Forward: each (b, h) pair's queries in blocks of kQueryBlock rows; for each block the keys in
// blocks of kKeyBlock, with a running maximum m and sum l per row (online softmax): a new key
// block rescales what was summed by exp(m_old - m_new). Memory is one scores tile, one
// accumulator tile and m, l per thread: never Tq x Tk.
// Backward, recomputing each probability tile as P = exp(s - lse) (0 where s = -inf):
//   1. D_i = out_grad[i] . out[i] per row (a workspace of B * H * Tq values);
//   2. d_q per (b, h, query block), over the key blocks;
//   3. d_k and d_v per (b, h, key block), over the query blocks.
// Each output row is summed by one thread, so no two threads write the same row. Causal
// attention skips the tiles above the diagonal. Dot products and row updates run along D, which
// is contiguous, in loops marked for SIMD, in the widest vectors the processor has
// (WEFT_CPU_VECTOR_CLONES).
#include "ops/nn/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/attrs.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

constexpr int64_t kQueryBlock = 32;
constexpr int64_t kKeyBlock = 64;

// The tensors of one call, all row-major: q (BH, Tq, D), k (BH, Tk, D), v (BH, Tk, Dv), mask as
// AttentionDims::MaskAt reads it (null without one).
template <typename T>
struct Heads {
  const AttentionDims& d;
  const T *q, *k, *v, *mask;
  const T* Q(int64_t bh, int64_t i) const { return q + (bh * d.tq + i) * d.d; }
  const T* K(int64_t bh, int64_t j) const { return k + (bh * d.tk + j) * d.d; }
  const T* V(int64_t bh, int64_t j) const { return v + (bh * d.tk + j) * d.dv; }
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

template <typename T>
inline T Dot(const T* a, const T* b, int64_t n) {
  T sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y[0, n) += a * x[0, n).
template <typename T>
inline void Axpy(T a, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// s (rows x kKeyBlock, row stride kKeyBlock) = scale * q k^T + mask for queries [i0, i1) and keys
// [j0, j1) of pair bh; -inf where causal masks.
template <typename T>
WEFT_CPU_VECTOR_CLONES void Scores(const Heads<T>& x, int64_t bh, int64_t i0, int64_t i1,
                                   int64_t j0, int64_t j1, T* s) {
  const AttentionDims& d = x.d;
  const T scale = static_cast<T>(d.scale);
  const int64_t b = bh / d.h, h = bh % d.h;
  for (int64_t i = i0; i < i1; ++i) {
    T* row = s + (i - i0) * kKeyBlock;
    const T* q = x.Q(bh, i);
    for (int64_t j = j0; j < j1; ++j) {
      T v = scale * Dot(q, x.K(bh, j), d.d);
      if (x.mask) v += x.mask[d.MaskAt(b, h, i, j)];
      if (d.causal && j > i) v = static_cast<T>(kMinusInf);
      row[j - j0] = v;
    }
  }
}

// The last key block a query block [i0, i1) reads: causal attention stops at the diagonal.
int64_t KeyEnd(const AttentionDims& d, int64_t i1) { return d.causal ? std::min(d.tk, i1) : d.tk; }

// ---- Forward ----

// Per thread: the scores tile, the output accumulators and the running maximum and sum per row.
template <typename T>
struct ForwardScratch {
  explicit ForwardScratch(const AttentionDims& d)
      : s(kQueryBlock * kKeyBlock), acc(kQueryBlock * d.dv), m(kQueryBlock), l(kQueryBlock) {}
  std::vector<T> s, acc, m, l;
};

// Folds keys [j0, j1) into row r's running maximum, sum and accumulator.
template <typename T>
WEFT_CPU_VECTOR_CLONES void OnlineSoftmaxRow(const Heads<T>& x, int64_t bh, int64_t j0, int64_t j1,
                                             const T* s, ForwardScratch<T>& w, int64_t r) {
  const int64_t dv = x.d.dv;
  T max = static_cast<T>(kMinusInf);
  for (int64_t c = 0; c < j1 - j0; ++c) max = std::max(max, s[c]);
  const T m_new = std::max(w.m[r], max);
  if (m_new == static_cast<T>(kMinusInf)) return;  // every key so far is masked
  const T alpha = std::exp(w.m[r] - m_new);        // 0 when nothing was summed yet
  T* acc = w.acc.data() + r * dv;
  for (int64_t c = 0; c < dv; ++c) acc[c] *= alpha;
  T sum = w.l[r] * alpha;
  for (int64_t c = 0; c < j1 - j0; ++c) {
    if (s[c] == static_cast<T>(kMinusInf)) continue;
    const T p = std::exp(s[c] - m_new);
    sum += p;
    Axpy(p, x.V(bh, j0 + c), acc, dv);
  }
  w.l[r] = sum;
  w.m[r] = m_new;
}

// out and lse of one query block, stored as the requests say.
template <typename T>
void ForwardBlock(const Heads<T>& x, const Block& blk, ForwardScratch<T>& w,
                  std::span<const OpReq> req, T* out, T* lse) {
  const AttentionDims& d = x.d;
  const int64_t rows = blk.last - blk.first;
  std::fill_n(w.acc.begin(), rows * d.dv, T(0));
  std::fill_n(w.m.begin(), rows, static_cast<T>(kMinusInf));
  std::fill_n(w.l.begin(), rows, T(0));
  for (int64_t j0 = 0; j0 < KeyEnd(d, blk.last); j0 += kKeyBlock) {
    const int64_t j1 = std::min(j0 + kKeyBlock, d.tk);
    Scores(x, blk.bh, blk.first, blk.last, j0, j1, w.s.data());
    for (int64_t r = 0; r < rows; ++r)
      OnlineSoftmaxRow(x, blk.bh, j0, j1, w.s.data() + r * kKeyBlock, w, r);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t row = blk.bh * d.tq + blk.first + r;
    const bool empty = w.l[r] == 0;  // every key masked: out 0, lse -inf
    const T inv = empty ? T(0) : 1 / w.l[r];
    const T* acc = w.acc.data() + r * d.dv;
    StoreRange(out + row * d.dv, AsWrite(req[0]), 0, d.dv, [&](int64_t c) { return acc[c] * inv; });
    Store(lse[row], AsWrite(req[1]), empty ? static_cast<T>(kMinusInf) : w.m[r] + std::log(w.l[r]));
  }
}

// in: (q, k, v[, mask]); out: (out, lse).
template <typename T>
void ForwardLoops(const AttentionDims& d, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  const Heads<T> x{d, in[0].data<T>(), in[1].data<T>(), in[2].data<T>(),
                   d.mask ? in[3].data<T>() : nullptr};
  T *o = out[0].data<T>(), *lse = out[1].data<T>();
  ParallelFor(Blocks(d, kQueryBlock, d.tq), 1, [&](int64_t begin, int64_t end) {
    ForwardScratch<T> w(d);
    for (int64_t item = begin; item < end; ++item)
      ForwardBlock(x, BlockOf(item, kQueryBlock, d.tq), w, req, o, lse);
  });
}

// ---- Backward ----

// What the backward reads besides Heads: out_grad and out (BH, Tq, Dv), lse and D (BH, Tq).
template <typename T>
struct Grads {
  const T *dy, *y, *lse;
  T* delta;  // D_i = dy[i] . y[i], computed first
  const T* Dy(const AttentionDims& d, int64_t bh, int64_t i) const {
    return dy + (bh * d.tq + i) * d.dv;
  }
};

// P = exp(s - lse): 0 for a masked key (s = -inf), so also in a row whose keys are all masked.
template <typename T>
inline T Probability(T s, T lse) {
  return s == static_cast<T>(kMinusInf) ? T(0) : std::exp(s - lse);
}

// dS for query i and key j from their score: P * (dy[i] . v[j] - D_i).
template <typename T>
inline T ScoreGrad(const Heads<T>& x, const Grads<T>& g, int64_t bh, int64_t i, int64_t j, T s,
                   T* p_out) {
  const int64_t row = bh * x.d.tq + i;
  const T p = Probability(s, g.lse[row]);
  *p_out = p;
  if (p == 0) return T(0);
  return p * (Dot(g.Dy(x.d, bh, i), x.V(bh, j), x.d.dv) - g.delta[row]);
}

// d_q of one query block: scale * sum over keys of dS k.
template <typename T>
WEFT_CPU_VECTOR_CLONES void QueryGradBlock(const Heads<T>& x, const Grads<T>& g, const Block& blk,
                                           std::vector<T>& s, std::vector<T>& acc, OpReq req,
                                           T* dq) {
  const AttentionDims& d = x.d;
  std::fill_n(acc.begin(), (blk.last - blk.first) * d.d, T(0));
  for (int64_t j0 = 0; j0 < KeyEnd(d, blk.last); j0 += kKeyBlock) {
    const int64_t j1 = std::min(j0 + kKeyBlock, d.tk);
    Scores(x, blk.bh, blk.first, blk.last, j0, j1, s.data());
    for (int64_t i = blk.first; i < blk.last; ++i) {
      T* a = acc.data() + (i - blk.first) * d.d;
      for (int64_t j = j0; j < j1; ++j) {
        T p;
        const T ds = ScoreGrad(x, g, blk.bh, i, j, s[(i - blk.first) * kKeyBlock + j - j0], &p);
        if (ds != 0) Axpy(ds, x.K(blk.bh, j), a, d.d);
      }
    }
  }
  const T scale = static_cast<T>(d.scale);
  for (int64_t i = blk.first; i < blk.last; ++i) {
    const T* a = acc.data() + (i - blk.first) * d.d;
    StoreRange(dq + (blk.bh * d.tq + i) * d.d, req, 0, d.d,
               [&](int64_t c) { return a[c] * scale; });
  }
}

// d_k and d_v of one key block: scale * sum over queries of dS^T q, and P^T dy.
template <typename T>
WEFT_CPU_VECTOR_CLONES void KeyGradBlock(const Heads<T>& x, const Grads<T>& g, const Block& blk,
                                         std::vector<T>& s, std::vector<T>& dk_acc,
                                         std::vector<T>& dv_acc, std::span<const OpReq> req, T* dk,
                                         T* dv) {
  const AttentionDims& d = x.d;
  const int64_t keys = blk.last - blk.first;
  std::fill_n(dk_acc.begin(), keys * d.d, T(0));
  std::fill_n(dv_acc.begin(), keys * d.dv, T(0));
  const int64_t i_begin = d.causal ? blk.first / kQueryBlock * kQueryBlock : 0;
  for (int64_t i0 = i_begin; i0 < d.tq; i0 += kQueryBlock) {
    const int64_t i1 = std::min(i0 + kQueryBlock, d.tq);
    // s is (query, key) here too; its key columns are [blk.first, blk.last).
    Scores(x, blk.bh, i0, i1, blk.first, blk.last, s.data());
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = blk.first; j < blk.last; ++j) {
        T p;
        const T ds = ScoreGrad(x, g, blk.bh, i, j, s[(i - i0) * kKeyBlock + j - blk.first], &p);
        if (p == 0) continue;
        Axpy(p, g.Dy(d, blk.bh, i), dv_acc.data() + (j - blk.first) * d.dv, d.dv);
        Axpy(ds, x.Q(blk.bh, i), dk_acc.data() + (j - blk.first) * d.d, d.d);
      }
    }
  }
  const T scale = static_cast<T>(d.scale);
  for (int64_t j = blk.first; j < blk.last; ++j) {
    const T *a = dk_acc.data() + (j - blk.first) * d.d, *b = dv_acc.data() + (j - blk.first) * d.dv;
    const int64_t row = blk.bh * d.tk + j;
    StoreRange(dk + row * d.d, req[1], 0, d.d, [&](int64_t c) { return a[c] * scale; });
    StoreRange(dv + row * d.dv, req[2], 0, d.dv, [&](int64_t c) { return b[c]; });
  }
}

// D_i = dy[i] . y[i] for every row, into g.delta.
template <typename T>
void RowDeltas(const AttentionDims& d, const Grads<T>& g) {
  ParallelFor(d.Heads() * d.tq, 64, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row)
      g.delta[row] = Dot(g.dy + row * d.dv, g.y + row * d.dv, d.dv);
  });
}

// in: (out_grad, q, k, v, out, lse[, mask]); out: (d_q, d_k, d_v).
template <typename T>
void BackwardLoops(const OpContext& ctx, const AttentionDims& d, std::span<const TensorView> in,
                   std::span<const OpReq> req_in, std::span<const TensorView> out) {
  const OpReq req[3] = {AsWrite(req_in[0]), AsWrite(req_in[1]), AsWrite(req_in[2])};
  const Heads<T> x{d, in[1].data<T>(), in[2].data<T>(), in[3].data<T>(),
                   d.mask ? in[6].data<T>() : nullptr};
  const Grads<T> g{in[0].data<T>(), in[4].data<T>(), in[5].data<T>(),
                   static_cast<T*>(ctx.Workspace(d.Heads() * d.tq * sizeof(T)))};
  RowDeltas(d, g);
  if (req[0] != OpReq::kNull) {
    ParallelFor(Blocks(d, kQueryBlock, d.tq), 1, [&](int64_t begin, int64_t end) {
      std::vector<T> s(kQueryBlock * kKeyBlock), acc(kQueryBlock * d.d);
      for (int64_t item = begin; item < end; ++item)
        QueryGradBlock(x, g, BlockOf(item, kQueryBlock, d.tq), s, acc, req[0], out[0].data<T>());
    });
  }
  if (req[1] == OpReq::kNull && req[2] == OpReq::kNull) return;
  ParallelFor(Blocks(d, kKeyBlock, d.tk), 1, [&](int64_t begin, int64_t end) {
    std::vector<T> s(kQueryBlock * kKeyBlock), dk(kKeyBlock * d.d), dv(kKeyBlock * d.dv);
    for (int64_t item = begin; item < end; ++item)
      KeyGradBlock(x, g, BlockOf(item, kKeyBlock, d.tk), s, dk, dv, req, out[1].data<T>(),
                   out[2].data<T>());
  });
}

// ---- compute ----

AttentionDims DimsOf(const char* op, const Attrs& a, const TensorView& q, const TensorView& k,
                     const TensorView& v, const TensorView* mask) {
  const AttentionParam& p = a.Get<AttentionParam>();
  return AttentionDimsOf(op, p, q.shape(), k.shape(), v.shape(),
                         p.use_mask ? &mask->shape() : nullptr);
}

void CheckCpuType(const char* op, DType t) {
  if (t == DType::kFloat32 || t == DType::kFloat64) return;
  WEFT_THROW(op << ": the CPU computes attention in float32 or float64 (bfloat16 not yet), found "
                << t);
}

void AttentionForward(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  CheckCpuType("Attention", in[0].dtype());
  const AttentionDims d =
      DimsOf("Attention", a, in[0], in[1], in[2], in.size() > 3 ? &in[3] : nullptr);
  if (in[0].dtype() == DType::kFloat64) return ForwardLoops<double>(d, in, req, out);
  ForwardLoops<float>(d, in, req, out);
}

void AttentionBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
  const char* op = "_backward_Attention";
  CheckCpuType(op, in[1].dtype());
  const AttentionDims d = DimsOf(op, a, in[1], in[2], in[3], in.size() > 6 ? &in[6] : nullptr);
  if (in[1].dtype() == DType::kFloat64) return BackwardLoops<double>(ctx, d, in, req, out);
  BackwardLoops<float>(ctx, d, in, req, out);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"Attention", {.compute = AttentionForward}},
                               {"_backward_Attention", {.compute = AttentionBackward}},
                           });

}  // namespace
}  // namespace weft::cpu
