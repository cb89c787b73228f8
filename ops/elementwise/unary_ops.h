// The elementwise unary ops, listed once: each row is an op's name, its functor in ops/math/unary.h
// (namespace weft::fn), its description, and whether it takes the attribute `scalar`. The op
// definitions (unary.cc) and each device's compute (ops/cpu/unary.cc, ops/gpu/unary.cc) expand
// this list, so an op added here exists everywhere at once.
//
// And Activation's act_type: its value, the name users write, and the functor it applies; and,
// defined beside the table: clip, whose functor takes two scalars (a_min, a_max), and gelu, whose
// attribute `approximate` picks its functor (Gelu, or GeluTanh: what gelu_tanh applies).
#pragma once

#include <cstdint>
#include <optional>

#include "ops/attrs.h"
#include "ops/math/unary.h"
#include "ops/op.h"

// X(name, functor, description, has_scalar)
#define WEFT_UNARY_OPS(X)                                                                          \
  X(neg, Neg, "-x", false)                                                                         \
  X(exp, Exp, "exp(x)", false)                                                                     \
  X(log, Log, "natural logarithm", false)                                                          \
  X(sqrt, Sqrt, "square root", false)                                                              \
  X(square, Square, "x * x", false)                                                                \
  X(abs, Abs, "|x|", false)                                                                        \
  X(sigmoid, Sigmoid, "1 / (1 + exp(-x))", false)                                                  \
  X(tanh, Tanh, "hyperbolic tangent", false)                                                       \
  X(relu, Relu, "max(x, 0)", false)                                                                \
  X(relu6, Relu6, "min(max(x, 0), 6): MobileNet's activation (PyTorch's ReLU6)", false)            \
  X(softrelu, SoftRelu, "log(1 + exp(x))", false)                                                  \
  X(erf, Erf, "the error function, 2 / sqrt(pi) * integral of exp(-t^2) from 0 to x", false)       \
  X(gelu_tanh, GeluTanh, "gelu's tanh approximation (GPT-2's): gelu with approximate=tanh", false) \
  X(add_scalar, AddScalar, "x + scalar", true)                                                     \
  X(sub_scalar, SubScalar, "x - scalar", true)                                                     \
  X(rsub_scalar, RSubScalar, "scalar - x", true)                                                   \
  X(mul_scalar, MulScalar, "x * scalar", true)                                                     \
  X(div_scalar, DivScalar, "x / scalar", true)                                                     \
  X(rdiv_scalar, RDivScalar, "scalar / x", true)                                                   \
  X(maximum_scalar, MaxScalar, "max(x, scalar)", true)                                             \
  X(minimum_scalar, MinScalar, "min(x, scalar)", true)

// The functors of one scalar that ops beside the table apply, beyond the table's: gelu's exact
// form (gelu picks Gelu or GeluTanh by its attribute `approximate`). Code that lists every such
// functor (the CPU's lane chains) expands both lists.
// X(functor)
#define WEFT_UNARY_EXTRA_FUNCTORS(X) X(Gelu)

// X(value, name, functor)
#define WEFT_ACTIVATIONS(X)          \
  X(kRelu, "relu", Relu)             \
  X(kRelu6, "relu6", Relu6)          \
  X(kSigmoid, "sigmoid", Sigmoid)    \
  X(kTanh, "tanh", Tanh)             \
  X(kSoftRelu, "softrelu", SoftRelu) \
  X(kGelu, "gelu", Gelu)             \
  X(kGeluTanh, "gelu_tanh", GeluTanh)

namespace weft {

// The attribute of the *_scalar ops and of their backward ops.
struct ScalarParam {
  double scalar;
};

// The attributes of clip and _backward_clip: a_min <= a_max.
struct ClipParam {
  double a_min, a_max;
};

// The attribute of gelu and _backward_gelu: which formula (PyTorch's `approximate`).
enum class GeluApproximate : uint8_t {
  kNone,  // x Phi(x) through erf: fn::Gelu
  kTanh,  // the tanh approximation: fn::GeluTanh (the op gelu_tanh)
};
struct GeluParam {
  GeluApproximate approximate;
};

// The functor gelu applies for `p`.
inline const char* GeluFunctor(const GeluParam& p) {
  return p.approximate == GeluApproximate::kTanh ? "weft::fn::GeluTanh" : "weft::fn::Gelu";
}

// The scalars the functor of an op with attributes P takes (what PointwiseFn::scalars_of gives).
inline PointwiseScalars ScalarsOf(const ScalarParam& p) { return {1, {p.scalar}}; }
inline PointwiseScalars ScalarsOf(const ClipParam& p) { return {2, {p.a_min, p.a_max}}; }
template <typename P>
PointwiseScalars AttrScalars(const Attrs& a) {
  return ScalarsOf(a.Get<P>());
}

#define WEFT_ACT_VALUE(value, name, functor) value,
enum class ActType : uint8_t { WEFT_ACTIVATIONS(WEFT_ACT_VALUE) };
#undef WEFT_ACT_VALUE

// The attribute of Activation and _backward_Activation.
struct ActivationParam {
  ActType act_type;
};

// The functor of ops/math/unary.h an act_type applies ("weft::fn::Relu").
inline const char* ActivationFunctor(ActType act) {
  switch (act) {
#define WEFT_ACT_CASE(value, name, functor) \
  case ActType::value:                      \
    return "weft::fn::" #functor;
    WEFT_ACTIVATIONS(WEFT_ACT_CASE)
#undef WEFT_ACT_CASE
  }
  return "";
}

// The name users write for an act_type ("relu").
inline const char* ActivationName(ActType act) {
  switch (act) {
#define WEFT_ACT_CASE(value, name, functor) \
  case ActType::value:                      \
    return name;
    WEFT_ACTIVATIONS(WEFT_ACT_CASE)
#undef WEFT_ACT_CASE
  }
  return "";
}

// What the gradient of an act_type reads: x, y or nothing (its functor's kGradReads).
inline fn::GradReads ActivationGradReads(ActType act) {
  switch (act) {
#define WEFT_ACT_CASE(value, name, functor) \
  case ActType::value:                      \
    return fn::functor::kGradReads;
    WEFT_ACTIVATIONS(WEFT_ACT_CASE)
#undef WEFT_ACT_CASE
  }
  return fn::GradReads::kInput;
}

// The attribute `act_type`, one of the activations' names; absent: `fallback` (none: required).
ActType ReadActType(AttrReader& r, std::optional<ActType> fallback);

// A layer's activation epilogue (FullyConnected's `act_type`): "none" (the default) or an
// activation's name.
std::optional<ActType> ReadLayerAct(AttrReader& r);

}  // namespace weft
