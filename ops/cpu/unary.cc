// CPU compute of the elementwise unary ops of ops/elementwise/unary_ops.h, their *_scalar forms,
// Activation, clip, gelu, and their backward ops: vectorizable loops over the functors of
// ops/math/unary.h, on float32, float64 and bfloat16 (computed in float).
#include "ops/math/unary.h"

#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/layer_util.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// The loops over [b, e), vectorized (WEFT_CPU_VECTOR_CLONES); the lambdas take the pointers by
// value, which the loop then holds in registers.
// bfloat16 runs these float loops on blocks widened to float (Bf16Blocks), rounded once when
// stored.
template <typename F, typename T>
WEFT_CPU_VECTOR_CLONES void ForwardRange(const T* in, T s, T t, OpReq req, T* out, int64_t b,
                                         int64_t e) {
  StoreRange(out, req, b, e, [=](int64_t i) { return fn::ForwardOf<F>(in[i], s, t); });
}
template <typename F, typename T>
WEFT_CPU_VECTOR_CLONES void BackwardRange(const T* g, const T* v, T s, T t, OpReq req, T* grad,
                                          int64_t b, int64_t e) {
  StoreRange(grad, req, b, e, [=](int64_t i) { return fn::BackwardOf<F>(g[i], v[i], s, t); });
}

// x, y: one size (y may be x).
template <typename F>
void Forward(const PointwiseScalars& scalars, const TensorView& x, OpReq req, const TensorView& y) {
  WEFT_FLOAT_BF16_SWITCH(x.dtype(), T, "unary op", {
    using A = ArithOf<T>;
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const A s = static_cast<A>(scalars.values[0]), t = static_cast<A>(scalars.values[1]);
    ParallelFor(x.size(), 4096, [=](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        Bf16Blocks<1>({in}, req, out, b, e, [=](const float* const* v, float* y, int64_t n) {
          ForwardRange<F>(v[0], s, t, OpReq::kWrite, y, 0, n);
        });
      } else {
        ForwardRange<F>(in, s, t, req, out, b, e);
      }
    });
  });
}

// in: (dy) or (dy, x or y, as F::kGradReads says), one size; dx: that size (dx may be dy).
template <typename F>
void Backward(const PointwiseScalars& scalars, std::span<const TensorView> in, OpReq req,
              const TensorView& dx) {
  WEFT_FLOAT_BF16_SWITCH(dx.dtype(), T, "unary backward", {
    using A = ArithOf<T>;
    const T *g = in[0].data<T>(), *v = in.back().data<T>();  // v: dy itself when Grad reads nothing
    T* grad = dx.data<T>();
    const A s = static_cast<A>(scalars.values[0]), t = static_cast<A>(scalars.values[1]);
    ParallelFor(dx.size(), 4096, [=](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, BFloat16>) {
        Bf16Blocks<2>({g, v}, req, grad, b, e, [=](const float* const* in, float* y, int64_t n) {
          BackwardRange<F>(in[0], in[1], s, t, OpReq::kWrite, y, 0, n);
        });
      } else {
        BackwardRange<F>(g, v, s, t, req, grad, b, e);
      }
    });
  });
}

using ScalarsFn = PointwiseScalars (*)(const Attrs&);

// The rows of op `name` and its backward; `scalars` (null: none) reads the functor's scalars.
template <typename F>
void AddUnary(std::vector<NamedDeviceImpl>& table, const std::string& name, ScalarsFn scalars) {
  const auto of = [scalars](const Attrs& a) { return scalars ? scalars(a) : PointwiseScalars{}; };
  table.push_back(
      {name,
       {.compute = [of](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
         Forward<F>(of(a), in[0], req[0], out[0]);
       }}});
  table.push_back(
      {"_backward_" + name,
       {.compute = [of](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
         Backward<F>(of(a), in, req[0], out[0]);
       }}});
}

// Calls call(F{}) with the functor of `act`.
template <typename Call>
void DispatchActivation(ActType act, Call&& call) {
  switch (act) {
#define WEFT_ACT_CASE(value, name, functor) \
  case ActType::value:                      \
    return call(fn::functor{});
    WEFT_ACTIVATIONS(WEFT_ACT_CASE)
#undef WEFT_ACT_CASE
  }
}

void ActivationForward(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
  DispatchActivation(a.Get<ActivationParam>().act_type,
                     [&](auto f) { Forward<decltype(f)>({}, in[0], req[0], out[0]); });
}

void ActivationBackward(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
  DispatchActivation(a.Get<ActivationParam>().act_type,
                     [&](auto f) { Backward<decltype(f)>({}, in, req[0], out[0]); });
}

// Calls call(F{}) with the functor gelu applies for `a`.
template <typename Call>
void DispatchGelu(const Attrs& a, Call&& call) {
  if (a.Get<GeluParam>().approximate == GeluApproximate::kTanh) return call(fn::GeluTanh{});
  call(fn::Gelu{});
}

void GeluForward(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                 std::span<const OpReq> req, std::span<const TensorView> out) {
  DispatchGelu(a, [&](auto f) { Forward<decltype(f)>({}, in[0], req[0], out[0]); });
}

void GeluBackward(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  DispatchGelu(a, [&](auto f) { Backward<decltype(f)>({}, in, req[0], out[0]); });
}

std::vector<NamedDeviceImpl> UnaryImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_UNARY_CPU(name, functor, description, has_scalar) \
  AddUnary<fn::functor>(table, #name, has_scalar ? AttrScalars<ScalarParam> : nullptr);
  WEFT_UNARY_OPS(WEFT_UNARY_CPU)
#undef WEFT_UNARY_CPU
  AddUnary<fn::Clip>(table, "clip", AttrScalars<ClipParam>);
  table.push_back({"Activation", {.compute = ActivationForward}});
  table.push_back({"_backward_Activation", {.compute = ActivationBackward}});
  table.push_back({"gelu", {.compute = GeluForward}});
  table.push_back({"_backward_gelu", {.compute = GeluBackward}});
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, UnaryImpls());

}  // namespace

void ApplyActivation(ActType act, const TensorView& y) {
  DispatchActivation(act, [&](auto f) { Forward<decltype(f)>({}, y, OpReq::kWriteInplace, y); });
}

}  // namespace weft::cpu
