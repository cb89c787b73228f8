// Elementwise unary ops (neg, exp, log, sqrt, square, abs, sigmoid, tanh, relu, softrelu, gelu),
// their scalar-operand forms (add_scalar, ...), Activation, and their backward ops.
//
// Each function is a functor with Fwd(x) and Grad(x, y) = dy/dx (given x and y = Fwd(x)). The
// backward op `_backward_<name>` takes (dy, x, y) and gives dx = dy * Grad(x, y).
#include <algorithm>
#include <cmath>

#include "ops/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;

struct Neg { template <typename T> static T Fwd(T x, T) { return -x; } template <typename T> static T Grad(T, T, T) { return -1; } };
struct Exp { template <typename T> static T Fwd(T x, T) { return std::exp(x); } template <typename T> static T Grad(T, T y, T) { return y; } };
struct Log { template <typename T> static T Fwd(T x, T) { return std::log(x); } template <typename T> static T Grad(T x, T, T) { return 1 / x; } };
struct Sqrt { template <typename T> static T Fwd(T x, T) { return std::sqrt(x); } template <typename T> static T Grad(T, T y, T) { return T(0.5) / y; } };
struct Square { template <typename T> static T Fwd(T x, T) { return x * x; } template <typename T> static T Grad(T x, T, T) { return 2 * x; } };
struct Abs { template <typename T> static T Fwd(T x, T) { return std::abs(x); } template <typename T> static T Grad(T x, T, T) { return static_cast<T>(x > 0) - static_cast<T>(x < 0); } };
struct Sigmoid {
  template <typename T> static T Fwd(T x, T) { return 1 / (1 + std::exp(-x)); }
  template <typename T> static T Grad(T, T y, T) { return y * (1 - y); }
};
struct Tanh { template <typename T> static T Fwd(T x, T) { return std::tanh(x); } template <typename T> static T Grad(T, T y, T) { return 1 - y * y; } };
// Branch-free forms (a compare turned into a mask): with a branch per element the loop does not
// vectorize and mispredicts on half the elements of random data.
struct Relu { template <typename T> static T Fwd(T x, T) { return std::max(x, T(0)); } template <typename T> static T Grad(T x, T, T) { return x > 0 ? T(1) : T(0); } };
struct SoftRelu {  // log(1 + exp(x)), computed without overflow
  template <typename T> static T Fwd(T x, T) { return x > 20 ? x : std::log1p(std::exp(x)); }
  template <typename T> static T Grad(T x, T, T) { return 1 / (1 + std::exp(-x)); }
};
struct Gelu {  // the tanh approximation, as in BERT and GPT-2
  template <typename T> static T Fwd(T x, T) {
    return T(0.5) * x * (1 + std::tanh(T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x)));
  }
  template <typename T> static T Grad(T x, T, T) {
    const T u = T(kSqrt2OverPi) * (x + T(0.044715) * x * x * x);
    const T t = std::tanh(u);
    return T(0.5) * (1 + t) + T(0.5) * x * (1 - t * t) * T(kSqrt2OverPi) * (1 + 3 * T(0.044715) * x * x);
  }
};
// Scalar forms: the second argument is the attribute `scalar`.
struct AddScalar { template <typename T> static T Fwd(T x, T s) { return x + s; } template <typename T> static T Grad(T, T, T) { return 1; } };
struct SubScalar { template <typename T> static T Fwd(T x, T s) { return x - s; } template <typename T> static T Grad(T, T, T) { return 1; } };
struct RSubScalar { template <typename T> static T Fwd(T x, T s) { return s - x; } template <typename T> static T Grad(T, T, T) { return -1; } };
struct MulScalar { template <typename T> static T Fwd(T x, T s) { return x * s; } template <typename T> static T Grad(T, T, T s) { return s; } };
struct DivScalar { template <typename T> static T Fwd(T x, T s) { return x / s; } template <typename T> static T Grad(T, T, T s) { return 1 / s; } };
struct RDivScalar { template <typename T> static T Fwd(T x, T s) { return s / x; } template <typename T> static T Grad(T x, T, T s) { return -s / (x * x); } };
struct MaxScalar { template <typename T> static T Fwd(T x, T s) { return std::max(x, s); } template <typename T> static T Grad(T x, T, T s) { return static_cast<T>(x > s); } };
struct MinScalar { template <typename T> static T Fwd(T x, T s) { return std::min(x, s); } template <typename T> static T Grad(T x, T, T s) { return static_cast<T>(x < s); } };

struct ScalarParam {
  double scalar;
};
ScalarParam ParseScalar(AttrReader& r) { return {r.Float("scalar", std::nullopt)}; }

std::vector<Shape> SameAsInput0(const Attrs&, const std::vector<Shape>& in) { return {in[0]}; }

std::vector<Shape> BackwardShape(const Attrs&, const std::vector<Shape>& in) {
  CheckSameShape(in[0], in[1], "the output gradient and the input");
  CheckSameShape(in[0], in[2], "the output gradient and the output");
  return {in[0]};
}

template <typename F>
void Forward(double scalar, const TensorView& x, OpReq req, const TensorView& y) {
  WEFT_FLOAT_SWITCH(x.dtype(), T, "unary op", {
    const T* in = x.data<T>();
    T* out = y.data<T>();
    const T s = static_cast<T>(scalar);
    ParallelFor(x.size(), 4096, [=](int64_t b, int64_t e) {
      StoreRange(out, req, b, e, [=](int64_t i) { return F::Fwd(in[i], s); });
    });
  });
}

template <typename F>
void Backward(double scalar, const TensorView& dy, const TensorView& x, const TensorView& y, OpReq req,
              const TensorView& dx) {
  WEFT_FLOAT_SWITCH(dx.dtype(), T, "unary backward", {
    const T *g = dy.data<T>(), *in = x.data<T>(), *out = y.data<T>();
    T* grad = dx.data<T>();
    const T s = static_cast<T>(scalar);
    // By value: pointers the loop holds in registers, so it vectorizes.
    ParallelFor(dx.size(), 4096, [=](int64_t b, int64_t e) {
      StoreRange(grad, req, b, e, [=](int64_t i) { return g[i] * F::Grad(in[i], out[i], s); });
    });
  });
}

template <typename F>
void RegisterUnary(const std::string& name, const std::string& description, const std::string& expression,
                   bool has_scalar) {
  Op& fwd = RegisterOp(name);
  fwd.Describe(description).Inputs({"data"}).InferShape(SameAsInput0).Inplace({{0, 0}}).Pointwise(expression);
  Op& bwd = RegisterOp("_backward_" + name);
  bwd.Describe("gradient of " + name).Inputs({"out_grad", "data", "output"}).InferShape(BackwardShape).Inplace({{0, 0}});
  if (has_scalar) {
    fwd.Params(ParseScalar);
    bwd.Params(ParseScalar);
  }
  fwd.Compute(DeviceType::kCpu, [has_scalar](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                                             std::span<const OpReq> req, std::span<const TensorView> out) {
    Forward<F>(has_scalar ? a.Get<ScalarParam>().scalar : 0.0, in[0], req[0], out[0]);
  });
  bwd.Compute(DeviceType::kCpu, [has_scalar](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                                             std::span<const OpReq> req, std::span<const TensorView> out) {
    Backward<F>(has_scalar ? a.Get<ScalarParam>().scalar : 0.0, in[0], in[1], in[2], req[0], out[0]);
  });
  fwd.Gradient([name](const Attrs& a, GradBuilder& g) {
    g.SetInputGrad(0, g.Op("_backward_" + name, {g.OutGrad(0), g.Input(0), g.Output(0)}, a.raw()));
  });
}

// ---- Activation: one op, the function chosen by act_type ----

struct ActivationParam {
  std::string act_type;
};
ActivationParam ParseActivation(AttrReader& r) {
  return {r.Enum("act_type", {"relu", "sigmoid", "tanh", "softrelu", "gelu"}, std::nullopt)};
}

template <typename Fn>
void DispatchActivation(const std::string& act, Fn&& fn) {
  if (act == "relu") return fn(Relu{});
  if (act == "sigmoid") return fn(Sigmoid{});
  if (act == "tanh") return fn(Tanh{});
  if (act == "softrelu") return fn(SoftRelu{});
  return fn(Gelu{});
}

void RegisterActivation() {
  WEFT_REGISTER_OP(Activation)
      .Describe("elementwise activation: act_type is relu, sigmoid, tanh, softrelu or gelu")
      .Params(ParseActivation)
      .Inputs({"data"})
      .InferShape(SameAsInput0)
      .Inplace({{0, 0}})
      .Compute(DeviceType::kCpu, [](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                                    std::span<const OpReq> req, std::span<const TensorView> out) {
        DispatchActivation(a.Get<ActivationParam>().act_type,
                           [&](auto f) { Forward<decltype(f)>(0.0, in[0], req[0], out[0]); });
      })
      .Gradient([](const Attrs& a, GradBuilder& g) {
        g.SetInputGrad(0, g.Op("_backward_Activation", {g.OutGrad(0), g.Input(0), g.Output(0)}, a.raw()));
      });
  WEFT_REGISTER_OP(_backward_Activation)
      .Describe("gradient of Activation")
      .Params(ParseActivation)
      .Inputs({"out_grad", "data", "output"})
      .InferShape(BackwardShape)
      .Inplace({{0, 0}})
      .Compute(DeviceType::kCpu, [](const OpContext&, const Attrs& a, std::span<const TensorView> in,
                                    std::span<const OpReq> req, std::span<const TensorView> out) {
        DispatchActivation(a.Get<ActivationParam>().act_type,
                           [&](auto f) { Backward<decltype(f)>(0.0, in[0], in[1], in[2], req[0], out[0]); });
      });
}

const bool registered = [] {
  RegisterUnary<Neg>("neg", "-x", "-in0", false);
  RegisterUnary<Exp>("exp", "exp(x)", "exp(in0)", false);
  RegisterUnary<Log>("log", "natural logarithm", "log(in0)", false);
  RegisterUnary<Sqrt>("sqrt", "square root", "sqrt(in0)", false);
  RegisterUnary<Square>("square", "x * x", "in0 * in0", false);
  RegisterUnary<Abs>("abs", "|x|", "fabs(in0)", false);
  RegisterUnary<Sigmoid>("sigmoid", "1 / (1 + exp(-x))", "1 / (1 + exp(-in0))", false);
  RegisterUnary<Tanh>("tanh", "hyperbolic tangent", "tanh(in0)", false);
  RegisterUnary<Relu>("relu", "max(x, 0)", "fmax(in0, 0)", false);
  RegisterUnary<SoftRelu>("softrelu", "log(1 + exp(x))", "(in0 > 20 ? in0 : log1p(exp(in0)))", false);
  RegisterUnary<Gelu>("gelu", "x * Phi(x), tanh approximation",
                      "0.5 * in0 * (1 + tanh(0.7978845608028654 * (in0 + 0.044715 * in0 * in0 * in0)))", false);
  RegisterUnary<AddScalar>("add_scalar", "x + scalar", "in0 + scalar", true);
  RegisterUnary<SubScalar>("sub_scalar", "x - scalar", "in0 - scalar", true);
  RegisterUnary<RSubScalar>("rsub_scalar", "scalar - x", "scalar - in0", true);
  RegisterUnary<MulScalar>("mul_scalar", "x * scalar", "in0 * scalar", true);
  RegisterUnary<DivScalar>("div_scalar", "x / scalar", "in0 / scalar", true);
  RegisterUnary<RDivScalar>("rdiv_scalar", "scalar / x", "scalar / in0", true);
  RegisterUnary<MaxScalar>("maximum_scalar", "max(x, scalar)", "fmax(in0, scalar)", true);
  RegisterUnary<MinScalar>("minimum_scalar", "min(x, scalar)", "fmin(in0, scalar)", true);
  RegisterActivation();
  return true;
}();

}  // namespace
}  // namespace weft::cpu
