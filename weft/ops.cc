#include "weft/ops.h"

#include <map>
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

NDArray WithScalar(const char* op, const NDArray& a, double s) { return Invoke(op, {a}, {{"scalar", Number(s)}})[0]; }

// An op without attributes, looked up and its attributes parsed once (operators run on hot paths).
struct CachedOp {
  const Op* op;
  Attrs attrs;
};
const CachedOp& Cached(const char* name) {
  static const std::map<std::string, CachedOp>* cache = [] {
    auto* m = new std::map<std::string, CachedOp>;
    for (const char* n : {"add", "sub", "mul", "div", "neg"}) (*m)[n] = CachedOp{&GetOp(n), ParseAttrs(GetOp(n), {})};
    return m;
  }();
  return cache->at(name);
}

NDArray Apply(const char* name, const std::vector<NDArray>& inputs) {
  const CachedOp& c = Cached(name);
  return Invoke(*c.op, c.attrs, inputs)[0];
}

// a = a <op> b, in place.
NDArray& InPlace(const char* name, NDArray& a, const NDArray& b) {
  const CachedOp& c = Cached(name);
  const NDArray inputs[] = {a, b};
  InvokeInto(*c.op, c.attrs, inputs, {&a, 1});
  return a;
}

}  // namespace

namespace op {

NDArray add_n(const std::vector<NDArray>& inputs) {
  return Invoke("add_n", inputs, {{"num_args", std::to_string(inputs.size())}})[0];
}

NDArray FullyConnected(const NDArray& data, const NDArray& weight, const NDArray& bias, const AttrMap& attrs) {
  return Invoke("FullyConnected", {data, weight, bias}, attrs)[0];
}
NDArray FullyConnected(const NDArray& data, const NDArray& weight, const AttrMap& attrs) {
  return Invoke("FullyConnected", {data, weight}, attrs)[0];
}
NDArray Convolution(const NDArray& data, const NDArray& weight, const NDArray& bias, const AttrMap& attrs) {
  return Invoke("Convolution", {data, weight, bias}, attrs)[0];
}
NDArray Pooling(const NDArray& data, const AttrMap& attrs) { return Invoke("Pooling", {data}, attrs)[0]; }
NDArray softmax(const NDArray& data, const AttrMap& attrs) { return Invoke("softmax", {data}, attrs)[0]; }
NDArray log_softmax(const NDArray& data, const AttrMap& attrs) { return Invoke("log_softmax", {data}, attrs)[0]; }
NDArray SoftmaxCrossEntropy(const NDArray& logits, const NDArray& labels) {
  return Invoke("SoftmaxCrossEntropy", {logits, labels})[0];
}

void sgd_update(const NDArray& weight, const NDArray& grad, const AttrMap& attrs) {
  Invoke("sgd_update", {weight, grad}, attrs, {.outputs = {weight}});
}
void sgd_mom_update(const NDArray& weight, const NDArray& grad, const NDArray& mom, const AttrMap& attrs) {
  Invoke("sgd_mom_update", {weight, grad, mom}, attrs, {.outputs = {weight}});
}
void adam_update(const NDArray& weight, const NDArray& grad, const NDArray& mean, const NDArray& var,
                 const AttrMap& attrs) {
  Invoke("adam_update", {weight, grad, mean, var}, attrs, {.outputs = {weight}});
}

}  // namespace op

NDArray operator+(const NDArray& a, const NDArray& b) { return Apply("add", {a, b}); }
NDArray operator-(const NDArray& a, const NDArray& b) { return Apply("sub", {a, b}); }
NDArray operator*(const NDArray& a, const NDArray& b) { return Apply("mul", {a, b}); }
NDArray operator/(const NDArray& a, const NDArray& b) { return Apply("div", {a, b}); }
NDArray operator-(const NDArray& a) { return Apply("neg", {a}); }
NDArray operator+(const NDArray& a, double s) { return WithScalar("add_scalar", a, s); }
NDArray operator-(const NDArray& a, double s) { return WithScalar("sub_scalar", a, s); }
NDArray operator*(const NDArray& a, double s) { return WithScalar("mul_scalar", a, s); }
NDArray operator/(const NDArray& a, double s) { return WithScalar("div_scalar", a, s); }
NDArray operator*(double s, const NDArray& a) { return WithScalar("mul_scalar", a, s); }
NDArray operator-(double s, const NDArray& a) { return WithScalar("rsub_scalar", a, s); }
NDArray& operator+=(NDArray& a, const NDArray& b) { return InPlace("add", a, b); }
NDArray& operator-=(NDArray& a, const NDArray& b) { return InPlace("sub", a, b); }
NDArray& operator*=(NDArray& a, const NDArray& b) { return InPlace("mul", a, b); }
NDArray& operator/=(NDArray& a, const NDArray& b) { return InPlace("div", a, b); }

}  // namespace weft
