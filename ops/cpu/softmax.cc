// softmax and log_softmax along one axis.
//
//   data    any non-empty shape; attribute axis (default -1) picks the axis normalized along
//   output  data's shape
//   softmax(x)_i     = exp(x_i - m) / sum_j exp(x_j - m)         m = max_j x_j (for stability)
//   log_softmax(x)_i = x_i - m - log(sum_j exp(x_j - m))
//
// _backward_softmax and _backward_log_softmax take (out_grad, output) and give d_data:
//   softmax:      dx = y * (dy - sum(dy * y))
//   log_softmax:  dx = dy - exp(y) * sum(dy)
// The forward may write over data and the backward over out_grad (in place). float32 runs
// oneDNN's softmax_v2 (softmax_accurate, softmax_log); float64 runs the loops below.
#include <cmath>

#include "ops/internal/cpu_util.h"
#include "ops/internal/dnnl_util.h"
#include "ops/internal/nn_params.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

ShapeFn SoftmaxShape(const std::string& op) {
  return [op](const Attrs& a, const std::vector<Shape>& in) {
    if (in[0].ndim() < 1 || in[0].Size() == 0) {
      WEFT_THROW(op << ": data must be a non-empty array with at least one axis, found " << in[0]);
    }
    NormalizeAxis(op, a.Get<SoftmaxParam>().axis, in[0].ndim(), in[0]);
    return std::vector<Shape>{in[0]};
  };
}

// in: (out_grad, output).
ShapeFn SoftmaxBackwardShape(const std::string& op) {
  return [op](const Attrs& a, const std::vector<Shape>& in) {
    if (in[0] != in[1]) WEFT_THROW(op << ": out_grad must have the output's shape " << in[1] << ", found " << in[0]);
    return SoftmaxShape(op)(a, {in[1]});
  };
}

// ---- float64: loops ----

// The tensor seen as (outer, n, inner), n along the axis: a row is n values `inner` apart.
struct Rows {
  int64_t outer, n, inner;
};

Rows RowsOf(const Shape& s, int axis) {
  Rows r{1, s[axis], 1};
  for (int i = 0; i < axis; ++i) r.outer *= s[i];
  for (int i = axis + 1; i < s.ndim(); ++i) r.inner *= s[i];
  return r;
}

// Calls f(first) with the offset of each row's first value, rows in parallel.
template <typename F>
void ForEachRow(const Rows& r, F&& f) {
  ParallelFor(r.outer * r.inner, 16, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) f(row / r.inner * r.n * r.inner + row % r.inner);
  });
}

// x -> y, both in the layout of `r`. Each row is read whole before it is written: y may be x.
template <typename T>
void SoftmaxLoops(const Rows& r, bool log, const T* x, T* y) {
  ForEachRow(r, [&](int64_t first) {
    const T lse = LogSumExp(x + first, r.n, r.inner);
    for (int64_t k = 0; k < r.n; ++k) {
      const int64_t at = first + k * r.inner;
      y[at] = log ? x[at] - lse : std::exp(x[at] - lse);
    }
  });
}

// dy, y -> dx. The sums are taken before dx is written: dx may be dy.
template <typename T>
void SoftmaxBackwardLoops(const Rows& r, bool log, const T* dy, const T* y, T* dx) {
  ForEachRow(r, [&](int64_t first) {
    T sum = 0;
    for (int64_t k = 0; k < r.n; ++k) {
      const int64_t at = first + k * r.inner;
      sum += log ? dy[at] : dy[at] * y[at];
    }
    for (int64_t k = 0; k < r.n; ++k) {
      const int64_t at = first + k * r.inner;
      dx[at] = log ? dy[at] - std::exp(y[at]) * sum : y[at] * (dy[at] - sum);
    }
  });
}

// ---- float32: oneDNN softmax_v2 ----

dnnl::algorithm AlgorithmOf(bool log) { return log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate; }

dnnl::softmax_v2_forward::primitive_desc SoftmaxForwardDesc(const Shape& s, int axis, bool log) {
  const dnnl::softmax_v2_forward::desc desc(dnnl::prop_kind::forward_training, AlgorithmOf(log), PlainDesc(s),
                                            PlainDesc(s), axis);
  return {desc, ScratchpadAttr(), DnnlEngine()};
}

DnnlPrimitive SoftmaxPrimitive(const Shape& s, int axis, bool log, bool backward) {
  return CachedPrimitive(
      PrimitiveKey(log ? "log_softmax" : "softmax", backward ? "backward" : "forward", s, axis), [&] {
        if (!backward) return MakePrimitive<dnnl::softmax_v2_forward>(SoftmaxForwardDesc(s, axis, log));
        const dnnl::softmax_v2_backward::desc desc(AlgorithmOf(log), PlainDesc(s), PlainDesc(s), PlainDesc(s), axis);
        return MakePrimitive<dnnl::softmax_v2_backward>(
            {desc, ScratchpadAttr(), DnnlEngine(), SoftmaxForwardDesc(s, axis, log)});
      });
}

// ---- compute ----

// Forward, in: (data); backward, in: (out_grad, output). out: (output) or (d_data). Both may
// write over in[0], the declared in-place pair: Invoke gives kWriteInplace only for that pair on
// the same memory.
ComputeFn SoftmaxCompute(const std::string& op, bool log, bool backward) {
  return [op, log, backward](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                             std::span<const OpReq> req, std::span<const TensorView> out) {
    const Shape& s = in[0].shape();
    const int axis = NormalizeAxis(op, a.Get<SoftmaxParam>().axis, s.ndim(), s);
    if (req[0] == OpReq::kNull) return;
    if (!UseDnnl(in[0].dtype(), op.c_str())) {
      StagedOutputs staged(ctx, req, out, /*inplace_ok=*/true);
      double* dst = staged.Target(0).data<double>();
      if (backward) {
        SoftmaxBackwardLoops(RowsOf(s, axis), log, in[0].data<double>(), in[1].data<double>(), dst);
      } else {
        SoftmaxLoops(RowsOf(s, axis), log, in[0].data<double>(), dst);
      }
      staged.Finish();
      return;
    }
    const DnnlPrimitive prim = SoftmaxPrimitive(s, axis, log, backward);
    StagedOutputs staged(ctx, req, out, /*inplace_ok=*/true, {ScratchpadBytes(prim)});
    const dnnl::memory dst = DnnlMemory(staged.Target(0));
    if (backward) {
      ExecutePrimitive(
          prim, {{DNNL_ARG_DIFF_DST, DnnlMemory(in[0])}, {DNNL_ARG_DST, DnnlMemory(in[1])}, {DNNL_ARG_DIFF_SRC, dst}},
          staged.Extra(0));
    } else {
      ExecutePrimitive(prim, {{DNNL_ARG_SRC, DnnlMemory(in[0])}, {DNNL_ARG_DST, dst}}, staged.Extra(0));
    }
    staged.Finish();
  };
}

void RegisterSoftmax(const std::string& name, bool log, const std::string& description) {
  const std::string backward = "_backward_" + name;
  RegisterOp(name)
      .Describe(description)
      .Params(ParseSoftmax)
      .Inputs({"data"})
      .InferShape(SoftmaxShape(name))
      .Inplace({{0, 0}})
      .Resources({Resource::kTempSpace})
      .Compute(DeviceType::kCpu, SoftmaxCompute(name, log, false))
      .Gradient([backward](const Attrs& a, GradBuilder& g) {
        g.SetInputGrad(0, g.Op(backward, {g.OutGrad(0), g.Output(0)}, a.raw()));
      });
  RegisterOp(backward)
      .Describe("gradient of " + name)
      .Params(ParseSoftmax)
      .Inputs({"out_grad", "output"})
      .InferShape(SoftmaxBackwardShape(backward))
      .Inplace({{0, 0}})
      .Resources({Resource::kTempSpace})
      .Compute(DeviceType::kCpu, SoftmaxCompute(backward, log, true));
}

const bool registered = [] {
  RegisterSoftmax("softmax", false, "exp(x) / sum(exp(x)) along axis (default -1)");
  RegisterSoftmax("log_softmax", true, "x - log(sum(exp(x))) along axis (default -1)");
  return true;
}();

}  // namespace
}  // namespace weft::cpu
