#include "weft/ops.h"

#include <array>
#include <sstream>
#include <string>

namespace weft {

namespace {

std::string Number(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

NDArray WithScalar(const char* op, const NDArray& a, double s) {
  return Invoke(op, {a}, {{"scalar", Number(s)}})[0];
}

// The operators' ops, without attributes: looked up and their attributes parsed once, indexed by
// Arith (operators run on hot paths: no name lookup per call).
enum class Arith { kAdd, kSub, kMul, kDiv, kNeg };
struct CachedOp {
  const Op* op;
  Attrs attrs;
};
const CachedOp& Cached(Arith which) {
  static const std::array<CachedOp, 5>* cache = [] {
    auto* ops = new std::array<CachedOp, 5>;
    const char* names[] = {"add", "sub", "mul", "div", "neg"};  // in Arith's order
    for (size_t k = 0; k < ops->size(); ++k)
      (*ops)[k] = CachedOp{&GetOp(names[k]), ParseAttrs(GetOp(names[k]), {})};
    return ops;
  }();
  return (*cache)[static_cast<size_t>(which)];
}

NDArray Apply(Arith which, const std::vector<NDArray>& inputs) {
  const CachedOp& c = Cached(which);
  return Invoke(*c.op, c.attrs, inputs)[0];
}

// a = a <op> b, in place.
NDArray& InPlace(Arith which, NDArray& a, const NDArray& b) {
  const CachedOp& c = Cached(which);
  const NDArray inputs[] = {a, b};
  InvokeInto(*c.op, c.attrs, inputs, {&a, 1});
  return a;
}

}  // namespace

namespace op {

NDArray add_n(const std::vector<NDArray>& inputs) {
  return Invoke("add_n", inputs, {{"num_args", std::to_string(inputs.size())}})[0];
}

NDArray FullyConnected(const NDArray& data, const NDArray& weight, const NDArray& bias,
                       const AttrMap& attrs) {
  return Invoke("FullyConnected", {data, weight, bias}, attrs)[0];
}
NDArray FullyConnected(const NDArray& data, const NDArray& weight, const AttrMap& attrs) {
  return Invoke("FullyConnected", {data, weight}, attrs)[0];
}
NDArray Convolution(const NDArray& data, const NDArray& weight, const NDArray& bias,
                    const AttrMap& attrs) {
  return Invoke("Convolution", {data, weight, bias}, attrs)[0];
}
NDArray Pooling(const NDArray& data, const AttrMap& attrs) {
  return Invoke("Pooling", {data}, attrs)[0];
}
NDArray softmax(const NDArray& data, const AttrMap& attrs) {
  return Invoke("softmax", {data}, attrs)[0];
}
NDArray log_softmax(const NDArray& data, const AttrMap& attrs) {
  return Invoke("log_softmax", {data}, attrs)[0];
}
NDArray SoftmaxCrossEntropy(const NDArray& logits, const NDArray& labels) {
  return Invoke("SoftmaxCrossEntropy", {logits, labels})[0];
}

void sgd_update(const NDArray& weight, const NDArray& grad, const AttrMap& attrs) {
  Invoke("sgd_update", {weight, grad}, attrs, {.outputs = {weight}});
}
void sgd_mom_update(const NDArray& weight, const NDArray& grad, const NDArray& mom,
                    const AttrMap& attrs) {
  Invoke("sgd_mom_update", {weight, grad, mom}, attrs, {.outputs = {weight}});
}
void adam_update(const NDArray& weight, const NDArray& grad, const NDArray& mean,
                 const NDArray& var, const AttrMap& attrs) {
  Invoke("adam_update", {weight, grad, mean, var}, attrs, {.outputs = {weight}});
}
void adamw_update(const NDArray& weight, const NDArray& grad, const NDArray& mean,
                  const NDArray& var, const AttrMap& attrs) {
  Invoke("adamw_update", {weight, grad, mean, var}, attrs, {.outputs = {weight}});
}

}  // namespace op

NDArray operator+(const NDArray& a, const NDArray& b) { return Apply(Arith::kAdd, {a, b}); }
NDArray operator-(const NDArray& a, const NDArray& b) { return Apply(Arith::kSub, {a, b}); }
NDArray operator*(const NDArray& a, const NDArray& b) { return Apply(Arith::kMul, {a, b}); }
NDArray operator/(const NDArray& a, const NDArray& b) { return Apply(Arith::kDiv, {a, b}); }
NDArray operator-(const NDArray& a) { return Apply(Arith::kNeg, {a}); }
NDArray operator+(const NDArray& a, double s) { return WithScalar("add_scalar", a, s); }
NDArray operator-(const NDArray& a, double s) { return WithScalar("sub_scalar", a, s); }
NDArray operator*(const NDArray& a, double s) { return WithScalar("mul_scalar", a, s); }
NDArray operator/(const NDArray& a, double s) { return WithScalar("div_scalar", a, s); }
NDArray operator*(double s, const NDArray& a) { return WithScalar("mul_scalar", a, s); }
NDArray operator-(double s, const NDArray& a) { return WithScalar("rsub_scalar", a, s); }
NDArray& operator+=(NDArray& a, const NDArray& b) { return InPlace(Arith::kAdd, a, b); }
NDArray& operator-=(NDArray& a, const NDArray& b) { return InPlace(Arith::kSub, a, b); }
NDArray& operator*=(NDArray& a, const NDArray& b) { return InPlace(Arith::kMul, a, b); }
NDArray& operator/=(NDArray& a, const NDArray& b) { return InPlace(Arith::kDiv, a, b); }

}  // namespace weft
