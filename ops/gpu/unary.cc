// GPU compute of the elementwise unary ops of ops/cpu/unary.cc (neg ... gelu, the *_scalar
// forms, Activation) and of their _backward_* ops, on float32, float64 and bfloat16. The
// functors are in kernels/unary.cuh, under the names below.
#include <string>
#include <utility>

#include "ops/gpu/internal/attrs.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// x, y: any shape, one size (y may be x).
void Forward(const OpContext& ctx, const std::string& op, const std::string& functor, double scalar,
             const TensorView& x, OpReq req, const TensorView& y) {
  if (req == OpReq::kNull) return;
  const std::string t = KernelType(op, kElementwiseTypes, {&x, 1}, {&y, 1});
  const int v = PackWidth(x.dtype(), {x.raw(), y.raw()});
  const int64_t n = y.size();
  Launch(ctx, "unary.cuh", Instance("weft::UnaryForward", {"weft::" + functor, t, std::to_string(v)}), Packs(n, v),
         x.raw(), y.raw(), n, scalar, ReqCode(req));
}

// in: (dy, x, y), one shape; dx: that shape (dx may be dy).
void Backward(const OpContext& ctx, const std::string& op, const std::string& functor, double scalar,
              std::span<const TensorView> in, OpReq req, const TensorView& dx) {
  if (req == OpReq::kNull) return;
  const std::string t = KernelType(op, kElementwiseTypes, in, {&dx, 1});
  const int v = PackWidth(dx.dtype(), {in[0].raw(), in[1].raw(), in[2].raw(), dx.raw()});
  const int64_t n = dx.size();
  Launch(ctx, "unary.cuh", Instance("weft::UnaryBackward", {"weft::" + functor, t, std::to_string(v)}),
         Packs(n, v), in[0].raw(), in[1].raw(), in[2].raw(), dx.raw(), n, scalar, ReqCode(req));
}

void RegisterUnary(const std::string& op, const std::string& functor, bool has_scalar) {
  const std::string backward = "_backward_" + op;
  RegisterCompute(op, DeviceType::kGpu,
                  [=](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                      std::span<const TensorView> out) {
                    const double s = has_scalar ? ScalarAttr(op, a) : 0.0;
                    Forward(ctx, op, functor, s, in[0], req[0], out[0]);
                  });
  RegisterCompute(backward, DeviceType::kGpu,
                  [=](const OpContext& ctx, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                      std::span<const TensorView> out) {
                    const double s = has_scalar ? ScalarAttr(backward, a) : 0.0;
                    Backward(ctx, backward, functor, s, in, req[0], out[0]);
                  });
}

// Activation's act_type to its functor.
std::string ActivationFunctor(const Attrs& a) {
  const std::string act = ActTypeAttr("Activation", a);
  if (act == "relu") return "Relu";
  if (act == "sigmoid") return "Sigmoid";
  if (act == "tanh") return "TanhF";
  if (act == "softrelu") return "SoftRelu";
  return "Gelu";
}

void ActivationForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
  Forward(ctx, "Activation", ActivationFunctor(a), 0.0, in[0], req[0], out[0]);
}

void ActivationBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                        std::span<const OpReq> req, std::span<const TensorView> out) {
  Backward(ctx, "_backward_Activation", ActivationFunctor(a), 0.0, in, req[0], out[0]);
}

const bool registered = [] {
  const std::pair<const char*, const char*> plain[] = {
      {"neg", "Neg"},         {"exp", "ExpF"},       {"log", "LogF"},   {"sqrt", "SqrtF"},
      {"square", "Square"},   {"abs", "Abs"},        {"sigmoid", "Sigmoid"}, {"tanh", "TanhF"},
      {"relu", "Relu"},       {"softrelu", "SoftRelu"}, {"gelu", "Gelu"},
  };
  const std::pair<const char*, const char*> scalar[] = {
      {"add_scalar", "AddScalar"}, {"sub_scalar", "SubScalar"}, {"rsub_scalar", "RSubScalar"},
      {"mul_scalar", "MulScalar"}, {"div_scalar", "DivScalar"}, {"rdiv_scalar", "RDivScalar"},
      {"maximum_scalar", "MaxScalar"}, {"minimum_scalar", "MinScalar"},
  };
  for (const auto& [op, functor] : plain) RegisterUnary(op, functor, false);
  for (const auto& [op, functor] : scalar) RegisterUnary(op, functor, true);
  RegisterCompute("Activation", DeviceType::kGpu, ActivationForward);
  RegisterCompute("_backward_Activation", DeviceType::kGpu, ActivationBackward);
  return true;
}();

}  // namespace
}  // namespace weft::gpu
