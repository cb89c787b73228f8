// CPU compute of the elementwise unary ops of ops/elementwise/unary_ops.h, their *_scalar forms,
// Activation, and their backward ops: vectorizable loops over the functors of ops/math/unary.h.
#include "ops/math/unary.h"

#include "ops/cpu/internal/cpu_util.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// The loops over [b, e), vectorized (WEFT_CPU_VECTOR_CLONES); the lambdas take the pointers by
// value, which the loop then holds in registers.
template <typename F, typename T>
WEFT_CPU_VECTOR_CLONES void ForwardRange(const T* in, T s, OpReq req, T* out, int64_t b,
                                         int64_t e) {
  StoreRange(out, req, b, e, [=](int64_t i) { return F::Fwd(in[i], s); });
}
template <typename F, typename T>
WEFT_CPU_VECTOR_CLONES void BackwardRange(const T* g, const T* v, T s, OpReq req, T* grad,
                                          int64_t b, int64_t e) {
  StoreRange(grad, req, b, e, [=](int64_t i) { return fn::BackwardOf<F>(g[i], v[i], s); });
}

// x, y: one size (y may be x).
template <typename F>
void Forward(double scalar, const TensorView& x, OpReq req, const TensorView& y) {
  WEFT_FLOAT_SWITCH(x.dtype(), T, "unary op", {
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const T s = static_cast<T>(scalar);
    ParallelFor(x.size(), 4096,
                [=](int64_t b, int64_t e) { ForwardRange<F>(in, s, req, out, b, e); });
  });
}

// in: (dy) or (dy, x or y, as F::kGradReads says), one size; dx: that size (dx may be dy).
template <typename F>
void Backward(double scalar, std::span<const TensorView> in, OpReq req, const TensorView& dx) {
  WEFT_FLOAT_SWITCH(dx.dtype(), T, "unary backward", {
    const T *g = in[0].data<T>(), *v = in.back().data<T>();  // v: dy itself when Grad reads nothing
    T* grad = dx.data<T>();
    const T s = static_cast<T>(scalar);
    ParallelFor(dx.size(), 4096,
                [=](int64_t b, int64_t e) { BackwardRange<F>(g, v, s, req, grad, b, e); });
  });
}

// The rows of op `name` and its backward.
template <typename F>
void AddUnary(std::vector<NamedDeviceImpl>& table, const std::string& name, bool has_scalar) {
  table.push_back(
      {name,
       {.compute = [has_scalar](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                                std::span<const OpReq> req, std::span<const TensorView> out) {
         Forward<F>(has_scalar ? a.Get<ScalarParam>().scalar : 0.0, in[0], req[0], out[0]);
       }}});
  table.push_back(
      {"_backward_" + name,
       {.compute = [has_scalar](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                                std::span<const OpReq> req, std::span<const TensorView> out) {
         Backward<F>(has_scalar ? a.Get<ScalarParam>().scalar : 0.0, in, req[0], out[0]);
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
                     [&](auto f) { Forward<decltype(f)>(0.0, in[0], req[0], out[0]); });
}

void ActivationBackward(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
  DispatchActivation(a.Get<ActivationParam>().act_type,
                     [&](auto f) { Backward<decltype(f)>(0.0, in, req[0], out[0]); });
}

std::vector<NamedDeviceImpl> UnaryImpls() {
  std::vector<NamedDeviceImpl> table;
#define WEFT_UNARY_CPU(name, functor, description, has_scalar) \
  AddUnary<fn::functor>(table, #name, has_scalar);
  WEFT_UNARY_OPS(WEFT_UNARY_CPU)
#undef WEFT_UNARY_CPU
  table.push_back({"Activation", {.compute = ActivationForward}});
  table.push_back({"_backward_Activation", {.compute = ActivationBackward}});
  return table;
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, UnaryImpls());

}  // namespace
}  // namespace weft::cpu
