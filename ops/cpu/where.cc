// CPU compute of where and _backward_where (ops/elementwise/where.cc defines them): loops over the
// functor of ops/math/ternary.h, flat where the operands share the output's shape, else a walk of
// the output in row-major order. A broadcast operand's gradient is summed from -0 in that order,
// as the binary ops' are (ops/cpu/binary.cc).
#include <algorithm>
#include <array>

#include "core/shape.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/math/ternary.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// Calls f(o, off) for every output position o in row-major order, off[k] being the matching
// element of operand k (broadcast against `out`).
template <size_t N, typename F>
void ForEachBroadcast(const Shape& out, const std::array<Shape, N>& operands, F&& f) {
  std::array<std::array<int64_t, Shape::kMaxDims>, N> strides;
  for (size_t k = 0; k < N; ++k) strides[k] = BroadcastStrides(operands[k], out);
  std::array<int64_t, Shape::kMaxDims> idx{};
  std::array<int64_t, N> off{};
  const int n = out.ndim();
  for (int64_t o = 0, total = out.Size(); o < total; ++o) {
    f(o, off);
    for (int d = n - 1; d >= 0; --d) {  // odometer step
      for (size_t k = 0; k < N; ++k) off[k] += strides[k][d];
      if (++idx[d] < out[d]) break;
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][d] * out[d];
      idx[d] = 0;
    }
  }
}

// Selects in the arithmetic type (bfloat16: float, exact both ways).
template <typename T>
T WhereOf(T c, T a, T b) {
  return FromArith<T>(fn::Where::Fwd(ToArith(c), ToArith(a), ToArith(b)));
}

template <typename T>
WEFT_CPU_VECTOR_CLONES void WhereRange(const T* c, const T* a, const T* b, OpReq req, T* y,
                                       int64_t s, int64_t e) {
  StoreRange(y, req, s, e, [=](int64_t i) { return WhereOf(c[i], a[i], b[i]); });
}

bool SameShapes(std::span<const TensorView> views) {
  return std::all_of(views.begin(), views.end(),
                     [&](const TensorView& v) { return v.shape() == views[0].shape(); });
}

// in: (condition, a, b), broadcastable; out: their broadcast shape.
void WhereCompute(const OpContext&, const Attrs&, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  WEFT_FLOAT_BF16_SWITCH(out[0].dtype(), T, "where", {
    const T *c = in[0].data<T>(), *a = in[1].data<T>(), *b = in[2].data<T>();
    T* y = out[0].data<T>();
    const OpReq r = req[0];
    if (SameShapes(in) && in[0].shape() == out[0].shape()) {
      ParallelFor(out[0].size(), 4096,
                  [=](int64_t s, int64_t e) { WhereRange(c, a, b, r, y, s, e); });
      return;
    }
    ForEachBroadcast<3>(out[0].shape(), {in[0].shape(), in[1].shape(), in[2].shape()},
                        [&](int64_t o, const std::array<int64_t, 3>& k) {
                          Store(y[o], r, WhereOf(c[k[0]], a[k[1]], b[k[2]]));
                        });
  });
}

// in: (dy, condition, a, b), dy of the broadcast shape; out: (d a, d b), of a's and b's shapes.
// Sums into scratch from -0, then stores as requested.
void WhereBackwardCompute(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                          std::span<const OpReq> req, std::span<const TensorView> out) {
  WEFT_FLOAT_BF16_SWITCH(in[0].dtype(), T, "_backward_where", {
    using A = ArithOf<T>;
    const T *g = in[0].data<T>(), *c = in[1].data<T>();
    const int64_t na = out[0].size(), nb = out[1].size();
    A* sa = static_cast<A*>(ctx.Workspace((na + nb) * sizeof(A)));
    A* sb = sa + na;
    std::fill_n(sa, na + nb, A(-0.0));
    ForEachBroadcast<3>(in[0].shape(), {in[1].shape(), in[2].shape(), in[3].shape()},
                        [&](int64_t o, const std::array<int64_t, 3>& k) {
                          const A go = ToArith(g[o]), ck = ToArith(c[k[0]]);
                          sa[k[1]] += go * fn::Where::DA(ck);
                          sb[k[2]] += go * fn::Where::DB(ck);
                        });
    StoreArithN(out[0].data<T>(), req[0], sa, na);
    StoreArithN(out[1].data<T>(), req[1], sb, nb);
  });
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"where", {.compute = WhereCompute}},
                               {"_backward_where", {.compute = WhereBackwardCompute}},
                           });

}  // namespace
}  // namespace weft::cpu
