// CPU compute of the elementwise binary ops of ops/elementwise/binary_ops.h with broadcasting,
// their backward ops, and add_n: loops over the functors of ops/math/binary.h, on float32, float64
// and bfloat16 (computed in float, rounded once per result; add_n sums its terms in float).
//
// Sums (a broadcast operand's gradient, add_n) start from -0, the identity of IEEE addition (+0
// is not: +0 + -0 = +0), so that a sum of one term is that term, -0 included; they add in the
// order of the output's row-major positions (add_n: of the inputs).
#include "ops/math/binary.h"

#include <algorithm>
#include <array>
#include <string>

#include "core/shape.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/elementwise/binary_ops.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// Walks the output in row-major order, tracking the matching element of each operand.
struct BroadcastIndexer {
  BroadcastIndexer(const Shape& out, const Shape& a, const Shape& b)
      : out_(out), stride_a_(BroadcastStrides(a, out)), stride_b_(BroadcastStrides(b, out)) {}
  template <typename F>
  void ForEach(F&& f) const {  // f(out_index, a_index, b_index)
    const int n = out_.ndim();
    std::array<int64_t, Shape::kMaxDims> idx{};
    int64_t ia = 0, ib = 0;
    const int64_t total = out_.Size();
    for (int64_t o = 0; o < total; ++o) {
      f(o, ia, ib);
      for (int d = n - 1; d >= 0; --d) {  // odometer step
        ia += stride_a_[d];
        ib += stride_b_[d];
        if (++idx[d] < out_[d]) break;
        ia -= stride_a_[d] * out_[d];
        ib -= stride_b_[d] * out_[d];
        idx[d] = 0;
      }
    }
  }

 private:
  Shape out_;
  std::array<int64_t, Shape::kMaxDims> stride_a_, stride_b_;
};

// The loops over [s, e) of operands of one shape, vectorized (WEFT_CPU_VECTOR_CLONES); the
// lambdas take the pointers by value, which the loop then holds in registers.
// bfloat16 operands of one shape run these float loops on blocks widened to float (Bf16Blocks),
// each result rounded once when stored; broadcast ones compute in float element by element.
template <typename F, typename T>
WEFT_CPU_VECTOR_CLONES void ForwardRange(const T* a, const T* b, OpReq req, T* y, int64_t s,
                                         int64_t e) {
  StoreRange(y, req, s, e, [=](int64_t i) { return F::Fwd(a[i], b[i]); });
}
template <typename F, typename T>
WEFT_CPU_VECTOR_CLONES void BackwardRange(const T* g, const T* a, const T* b,
                                          std::span<const OpReq> req, T* ga, T* gb, int64_t s,
                                          int64_t e) {
  StoreRange(ga, req[0], s, e, [=](int64_t i) { return g[i] * F::DL(a[i], b[i]); });
  StoreRange(gb, req[1], s, e, [=](int64_t i) { return g[i] * F::DR(a[i], b[i]); });
}

template <typename F>
void ForwardBf16(const BFloat16* a, const BFloat16* b, OpReq req, BFloat16* y, int64_t s,
                 int64_t e) {
  Bf16Blocks<2>({a, b}, req, y, s, e, [](const float* const* in, float* out, int64_t n) {
    ForwardRange<F>(in[0], in[1], OpReq::kWrite, out, 0, n);
  });
}

// Both gradients from one widening of each block of the three inputs.
template <typename F>
void BackwardBf16(const BFloat16* g, const BFloat16* a, const BFloat16* b,
                  std::span<const OpReq> req, BFloat16* ga, BFloat16* gb, int64_t s, int64_t e) {
  const std::array<OpReq, 2> write = {req[0] == OpReq::kNull ? OpReq::kNull : OpReq::kWrite,
                                      req[1] == OpReq::kNull ? OpReq::kNull : OpReq::kWrite};
  Bf16BlocksTo<3, 2>({g, a, b}, {req[0], req[1]}, {ga, gb}, s, e,
                     [write](const float* const* in, float* const* out, int64_t n) {
                       BackwardRange<F>(in[0], in[1], in[2], write, out[0], out[1], 0, n);
                     });
}

// One row of a broadcast forward: n elements of y from a and b, each read along the row (stride
// SA, SB = 1) or repeated (0); vectorized.
template <typename F, int SA, int SB, typename T>
WEFT_CPU_VECTOR_CLONES void ForwardRow(const T* a, const T* b, OpReq req, T* y, int64_t n) {
  StoreRange(y, req, 0, n, [=](int64_t i) {
    return FromArith<T>(F::Fwd(ToArith(a[i * SA]), ToArith(b[i * SB])));
  });
}

// A broadcast forward as rows: the trailing axes along which each operand either moves with the
// output (contiguously) or stays (stride 0) are one row of `inner` elements, so a row is one
// vectorized loop; the rows (the other axes) run in parallel, each finding its operands' offsets.
// The same functor on the same elements as the element-by-element walk: the same bits.
template <typename F, typename T>
void BroadcastForward(const Shape& out, const Shape& l, const Shape& r, const T* a, const T* b,
                      OpReq req, T* y) {
  const std::array<int64_t, Shape::kMaxDims> sa = BroadcastStrides(l, out),
                                             sb = BroadcastStrides(r, out);
  const int n = out.ndim();
  int k = n;  // axes [k, n) make the row
  int64_t inner = 1;
  bool a_moves = true, b_moves = true, first = true;  // the row's pattern for each operand
  for (; k > 0; --k) {
    const int d = k - 1;
    const bool am = sa[d] != 0, bm = sb[d] != 0;
    if (out[d] == 1) continue;  // any pattern
    if (!first && (am != a_moves || bm != b_moves)) break;
    if ((am && sa[d] != inner) || (bm && sb[d] != inner)) break;  // not contiguous with the row
    a_moves = am, b_moves = bm, first = false;
    inner *= out[d];
  }
  const int64_t rows = out.Size() / std::max<int64_t>(inner, 1);
  const auto row_fn = a_moves ? (b_moves ? &ForwardRow<F, 1, 1, T> : &ForwardRow<F, 1, 0, T>)
                              : (b_moves ? &ForwardRow<F, 0, 1, T> : &ForwardRow<F, 0, 0, T>);
  ParallelFor(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(inner, 1)),
              [&](int64_t s, int64_t e) {
                for (int64_t row = s; row < e; ++row) {
                  int64_t ia = 0, ib = 0, rest = row;
                  for (int d = k - 1; d >= 0; --d) {
                    const int64_t i = rest % out[d];
                    rest /= out[d];
                    ia += i * sa[d], ib += i * sb[d];
                  }
                  row_fn(a + ia, b + ib, req, y + row * inner, inner);
                }
              });
}

template <typename F>
void Forward(const TensorView& l, const TensorView& r, OpReq req, const TensorView& out) {
  WEFT_FLOAT_BF16_SWITCH(out.dtype(), T, "binary op", {
    const T *a = l.data<T>(), *b = r.data<T>();
    T* y = out.data<T>();
    if (l.shape() == r.shape()) {
      ParallelFor(out.size(), 4096, [=](int64_t s, int64_t e) {
        if constexpr (std::is_same_v<T, BFloat16>) {
          ForwardBf16<F>(a, b, req, y, s, e);
        } else {
          ForwardRange<F>(a, b, req, y, s, e);
        }
      });
    } else {
      BroadcastForward<F>(out.shape(), l.shape(), r.shape(), a, b, req, y);
    }
  });
}

template <typename F>
void Backward(const OpContext& ctx, std::span<const TensorView> in, std::span<const OpReq> req,
              std::span<const TensorView> out) {
  const TensorView &dy = in[0], &l = in[1], &r = in[2], &dl = out[0], &dr = out[1];
  WEFT_FLOAT_BF16_SWITCH(dy.dtype(), T, "binary backward", {
    using A = ArithOf<T>;
    const T *g = dy.data<T>(), *a = l.data<T>(), *b = r.data<T>();
    if (l.shape() == r.shape()) {
      T *ga = dl.data<T>(), *gb = dr.data<T>();
      ParallelFor(dy.size(), 4096, [=](int64_t s, int64_t e) {
        if constexpr (std::is_same_v<T, BFloat16>) {
          BackwardBf16<F>(g, a, b, req, ga, gb, s, e);
        } else {
          BackwardRange<F>(g, a, b, req, ga, gb, s, e);
        }
      });
      return;
    }
    // Broadcast: sum into scratch (from -0, in the arithmetic type), then store as requested.
    A* sa = static_cast<A*>(ctx.Workspace((l.size() + r.size()) * sizeof(A)));
    A* sb = sa + l.size();
    std::fill_n(sa, l.size() + r.size(), A(-0.0));
    BroadcastIndexer(dy.shape(), l.shape(), r.shape())
        .ForEach([&](int64_t o, int64_t ia, int64_t ib) {
          const A ai = ToArith(a[ia]), bi = ToArith(b[ib]), go = ToArith(g[o]);
          sa[ia] += go * F::DL(ai, bi);
          sb[ib] += go * F::DR(ai, bi);
        });
    T *ga = dl.data<T>(), *gb = dr.data<T>();
    for (int64_t i = 0; i < l.size(); ++i) Store(ga[i], req[0], FromArith<T>(sa[i]));
    for (int64_t i = 0; i < r.size(); ++i) Store(gb[i], req[1], FromArith<T>(sb[i]));
  });
}

// The rows of op `name` and its backward.
template <typename F>
void AddBinary(std::vector<NamedDeviceImpl>& table, const std::string& name) {
  table.push_back({name,
                   {.compute = [](const OpContext&, const Attrs&, std::span<const TensorView> in,
                                  std::span<const OpReq> req, std::span<const TensorView> out) {
                     Forward<F>(in[0], in[1], req[0], out[0]);
                   }}});
  table.push_back(
      {"_backward_" + name,
       {.compute = [](const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                      std::span<const OpReq> req,
                      std::span<const TensorView> out) { Backward<F>(ctx, in, req, out); }}});
}

// y[s, e) = the sum of the inputs' elements [s, e), left to right in the arithmetic type (from x0:
// -0 + x0 is x0), a block that stays in L1 at a time, so that every loop is a vector loop over one
// input, in the widest vectors the processor has (WEFT_CPU_VECTOR_CLONES). y may be in[0].
template <typename T>
WEFT_CPU_VECTOR_CLONES void AddNRange(std::span<const TensorView> in, OpReq req, T* y, int64_t s,
                                      int64_t e) {
  using A = ArithOf<T>;
  constexpr int64_t kBlock = 2048;
  A sum[kBlock];
  for (int64_t b = s; b < e; b += kBlock) {
    const int64_t n = std::min(kBlock, e - b);
    const T* x0 = in[0].data<T>() + b;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) sum[i] = ToArith(x0[i]);
    for (size_t k = 1; k < in.size(); ++k) {
      const T* x = in[k].data<T>() + b;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) sum[i] += ToArith(x[i]);
    }
    StoreRange(y + b, req, 0, n, [&](int64_t i) { return FromArith<T>(sum[i]); });
  }
}

// in: num_args arrays of one shape; out: that shape (may be in[0]).
void AddNCompute(const OpContext&, const Attrs&, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  WEFT_FLOAT_BF16_SWITCH(out[0].dtype(), T, "add_n", {
    T* y = out[0].data<T>();
    ParallelFor(out[0].size(), 4096,
                [&](int64_t s, int64_t e) { AddNRange<T>(in, req[0], y, s, e); });
  });
}

std::vector<NamedDeviceImpl> BinaryImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_BINARY_CPU(name, functor, description) AddBinary<fn::functor>(table, #name);
  WEFT_BINARY_OPS(WEFT_BINARY_CPU)
#undef WEFT_BINARY_CPU
  table.push_back({"add_n", {.compute = AddNCompute}});
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, BinaryImpls());

}  // namespace
}  // namespace weft::cpu
