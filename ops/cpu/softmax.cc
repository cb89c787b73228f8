// CPU compute of softmax, log_softmax and their backward ops (ops/nn/softmax.cc defines them and
// says what they compute). float32 runs oneDNN's softmax_v2 (softmax_accurate, softmax_log);
// float64 runs the loops below.
#include <cmath>

#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

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

dnnl::algorithm AlgorithmOf(bool log) {
  return log ? dnnl::algorithm::softmax_log : dnnl::algorithm::softmax_accurate;
}

dnnl::softmax_v2_forward::primitive_desc SoftmaxForwardDesc(const Shape& s, int axis, bool log) {
  const dnnl::softmax_v2_forward::desc desc(dnnl::prop_kind::forward_training, AlgorithmOf(log),
                                            PlainDesc(s), PlainDesc(s), axis);
  return {desc, ScratchpadAttr(), DnnlEngine()};
}

DnnlPrimitive SoftmaxPrimitive(const Shape& s, int axis, bool log, bool backward) {
  return CachedPrimitive(
      PrimitiveKey(log ? "log_softmax" : "softmax", backward ? "backward" : "forward", s, axis),
      [&] {
        if (!backward)
          return MakePrimitive<dnnl::softmax_v2_forward>(SoftmaxForwardDesc(s, axis, log));
        const dnnl::softmax_v2_backward::desc desc(AlgorithmOf(log), PlainDesc(s), PlainDesc(s),
                                                   PlainDesc(s), axis);
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
      ExecutePrimitive(prim,
                       {{DNNL_ARG_DIFF_DST, DnnlMemory(in[0])},
                        {DNNL_ARG_DST, DnnlMemory(in[1])},
                        {DNNL_ARG_DIFF_SRC, dst}},
                       staged.Extra(0));
    } else {
      ExecutePrimitive(prim, {{DNNL_ARG_SRC, DnnlMemory(in[0])}, {DNNL_ARG_DST, dst}},
                       staged.Extra(0));
    }
    staged.Finish();
  };
}

WEFT_REGISTER_DEVICE_IMPLS(
    DeviceType::kCpu,
    {
        {"softmax", {.compute = SoftmaxCompute("softmax", false, false)}},
        {"_backward_softmax", {.compute = SoftmaxCompute("_backward_softmax", false, true)}},
        {"log_softmax", {.compute = SoftmaxCompute("log_softmax", true, false)}},
        {"_backward_log_softmax", {.compute = SoftmaxCompute("_backward_log_softmax", true, true)}},
    });

}  // namespace
}  // namespace weft::cpu
