// Elementwise binary ops with numpy-style broadcasting (add, sub, mul, div, maximum, minimum),
// their backward ops, and add_n (the n-ary sum that aggregates gradients).
//
// Broadcasting: shapes are aligned at their last axis; each pair of extents must be equal or one
// of them 1; the output takes the larger. The backward op `_backward_<name>` takes (dy, lhs, rhs)
// and gives (dlhs, drhs), summing over the axes each operand was broadcast along.
#include <algorithm>
#include <array>
#include <cstring>

#include "ops/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

struct Add { template <typename T> static T Fwd(T l, T r) { return l + r; }
             template <typename T> static T DL(T, T) { return 1; } template <typename T> static T DR(T, T) { return 1; } };
struct Sub { template <typename T> static T Fwd(T l, T r) { return l - r; }
             template <typename T> static T DL(T, T) { return 1; } template <typename T> static T DR(T, T) { return -1; } };
struct Mul { template <typename T> static T Fwd(T l, T r) { return l * r; }
             template <typename T> static T DL(T, T r) { return r; } template <typename T> static T DR(T l, T) { return l; } };
struct Div { template <typename T> static T Fwd(T l, T r) { return l / r; }
             template <typename T> static T DL(T, T r) { return 1 / r; } template <typename T> static T DR(T l, T r) { return -l / (r * r); } };
struct Max { template <typename T> static T Fwd(T l, T r) { return l >= r ? l : r; }
             template <typename T> static T DL(T l, T r) { return static_cast<T>(l >= r); } template <typename T> static T DR(T l, T r) { return static_cast<T>(l < r); } };
struct Min { template <typename T> static T Fwd(T l, T r) { return l <= r ? l : r; }
             template <typename T> static T DL(T l, T r) { return static_cast<T>(l <= r); } template <typename T> static T DR(T l, T r) { return static_cast<T>(l > r); } };

Shape BroadcastShape(const Shape& a, const Shape& b) {
  const int n = std::max(a.ndim(), b.ndim());
  Shape out;
  for (int i = 0; i < n; ++i) {
    const int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
    const int64_t ea = ia >= 0 ? a[ia] : 1, eb = ib >= 0 ? b[ib] : 1;
    if (ea != eb && ea != 1 && eb != 1) {
      WEFT_THROW("operands cannot be broadcast together: " << a << " and " << b << " (axis " << i << ": " << ea
                                                            << " vs " << eb << ")");
    }
    out.PushBack(ea == 1 ? eb : ea);
  }
  return out;
}

// Walks the output in row-major order, tracking the matching element of each operand.
struct BroadcastIndexer {
  BroadcastIndexer(const Shape& out, const Shape& a, const Shape& b) : out_(out) {
    const int n = out.ndim();
    int64_t sa = 1, sb = 1;
    for (int i = n - 1; i >= 0; --i) {
      const int ia = a.ndim() - n + i, ib = b.ndim() - n + i;
      const int64_t ea = ia >= 0 ? a[ia] : 1, eb = ib >= 0 ? b[ib] : 1;
      stride_a_[i] = ea == 1 ? 0 : sa;
      stride_b_[i] = eb == 1 ? 0 : sb;
      sa *= ea;
      sb *= eb;
    }
  }
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
  std::array<int64_t, Shape::kMaxDims> stride_a_{}, stride_b_{};
};

template <typename F>
void Forward(const TensorView& l, const TensorView& r, OpReq req, const TensorView& out) {
  WEFT_FLOAT_SWITCH(out.dtype(), T, "binary op", {
    const T *a = l.data<T>(), *b = r.data<T>();
    T* y = out.data<T>();
    if (l.shape() == r.shape()) {
      ParallelFor(out.size(), 4096, [&](int64_t s, int64_t e) {
        StoreRange(y, req, s, e, [&](int64_t i) { return F::Fwd(a[i], b[i]); });
      });
    } else {
      BroadcastIndexer(out.shape(), l.shape(), r.shape()).ForEach([&](int64_t o, int64_t ia, int64_t ib) {
        Store(y[o], req, F::Fwd(a[ia], b[ib]));
      });
    }
  });
}

template <typename F>
void Backward(const OpContext& ctx, std::span<const TensorView> in, std::span<const OpReq> req,
              std::span<const TensorView> out) {
  const TensorView &dy = in[0], &l = in[1], &r = in[2], &dl = out[0], &dr = out[1];
  WEFT_FLOAT_SWITCH(dy.dtype(), T, "binary backward", {
    const T *g = dy.data<T>(), *a = l.data<T>(), *b = r.data<T>();
    if (l.shape() == r.shape()) {
      T *ga = dl.data<T>(), *gb = dr.data<T>();
      ParallelFor(dy.size(), 4096, [&](int64_t s, int64_t e) {
        StoreRange(ga, req[0], s, e, [&](int64_t i) { return g[i] * F::DL(a[i], b[i]); });
        StoreRange(gb, req[1], s, e, [&](int64_t i) { return g[i] * F::DR(a[i], b[i]); });
      });
      return;
    }
    // Broadcast: sum into zeroed scratch, then store as requested.
    T* sa = static_cast<T*>(ctx.Workspace((l.size() + r.size()) * sizeof(T)));
    T* sb = sa + l.size();
    std::fill_n(sa, l.size() + r.size(), T(0));
    BroadcastIndexer(dy.shape(), l.shape(), r.shape()).ForEach([&](int64_t o, int64_t ia, int64_t ib) {
      sa[ia] += g[o] * F::DL(a[ia], b[ib]);
      sb[ib] += g[o] * F::DR(a[ia], b[ib]);
    });
    T *ga = dl.data<T>(), *gb = dr.data<T>();
    StoreN(ga, req[0], sa, l.size());
    StoreN(gb, req[1], sb, r.size());
  });
}

std::vector<Shape> BinaryShape(const Attrs&, const std::vector<Shape>& in) { return {BroadcastShape(in[0], in[1])}; }

std::vector<Shape> BinaryBackwardShape(const Attrs&, const std::vector<Shape>& in) {
  CheckSameShape(in[0], BroadcastShape(in[1], in[2]), "the output gradient and the broadcast operands");
  return {in[1], in[2]};
}

template <typename F>
void RegisterBinary(const std::string& name, const std::string& description, const std::string& expression) {
  RegisterOp(name)
      .Describe(description + ", with numpy-style broadcasting")
      .Inputs({"lhs", "rhs"})
      .InferShape(BinaryShape)
      .Inplace({{0, 0}, {1, 0}})
      .Pointwise(PointwiseKind::kBinary, expression)
      .Compute(DeviceType::kCpu, [](const OpContext&, const Attrs&, std::span<const TensorView> in,
                                    std::span<const OpReq> req, std::span<const TensorView> out) {
        Forward<F>(in[0], in[1], req[0], out[0]);
      })
      .Gradient([name](const Attrs&, GradBuilder& g) {
        GradEntry d = g.Op("_backward_" + name, {g.OutGrad(0), g.Input(0), g.Input(1)}, {}, 2);
        g.SetInputGrad(0, g.NodeOutput(d, 0));
        g.SetInputGrad(1, g.NodeOutput(d, 1));
      });
  RegisterOp("_backward_" + name)
      .Describe("gradient of " + name)
      .Inputs({"out_grad", "lhs", "rhs"})
      .Outputs(2)
      .InferShape(BinaryBackwardShape)
      .Resources({Resource::kTempSpace})
      .Compute(DeviceType::kCpu, [](const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                                    std::span<const OpReq> req, std::span<const TensorView> out) {
        Backward<F>(ctx, in, req, out);
      });
}

// ---- add_n ----

struct AddNParam {
  int num_args;
};
AddNParam ParseAddN(AttrReader& r) { return {r.Int("num_args", std::nullopt, 1)}; }

std::vector<Shape> AddNShape(const Attrs&, const std::vector<Shape>& in) {
  for (size_t i = 1; i < in.size(); ++i) {
    if (in[i] != in[0]) WEFT_THROW("add_n: expected every input to have shape " << in[0] << ", found " << in[i] << " for input " << i);
  }
  return {in[0]};
}

void AddNCompute(const OpContext&, const Attrs&, std::span<const TensorView> in, std::span<const OpReq> req,
                 std::span<const TensorView> out) {
  WEFT_FLOAT_SWITCH(out[0].dtype(), T, "add_n", {
    T* y = out[0].data<T>();
    ParallelFor(out[0].size(), 4096, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) {
        T sum = 0;
        for (const TensorView& x : in) sum += x.data<T>()[i];
        Store(y[i], req[0], sum);
      }
    });
  });
}

const bool registered = [] {
  RegisterBinary<Add>("add", "lhs + rhs", "weft::fn::Add");
  RegisterBinary<Sub>("sub", "lhs - rhs", "weft::fn::Sub");
  RegisterBinary<Mul>("mul", "lhs * rhs", "weft::fn::Mul");
  RegisterBinary<Div>("div", "lhs / rhs", "weft::fn::Div");
  RegisterBinary<Max>("maximum", "max(lhs, rhs)", "weft::fn::Max");
  RegisterBinary<Min>("minimum", "min(lhs, rhs)", "weft::fn::Min");
  WEFT_REGISTER_OP(add_n)
      .Describe("the sum of num_args arrays of one shape (aggregates gradients)")
      .Params(ParseAddN)
      .VariadicInputs([](const Attrs& a) { return a.Get<AddNParam>().num_args; })
      .InferShape(AddNShape)
      .Inplace({{0, 0}})
      .Pointwise(PointwiseKind::kAddN)
      .Compute(DeviceType::kCpu, AddNCompute)
      .Gradient([](const Attrs& a, GradBuilder& g) {
        for (int i = 0; i < a.Get<AddNParam>().num_args; ++i) g.SetInputGrad(i, g.OutGrad(0));
      });
  return true;
}();

}  // namespace
}  // namespace weft::cpu
