// Typed calls for the registered operators: weft::op::<name>(inputs..., attrs) runs the op on
// NDArrays through Invoke (see imperative.h) and returns its output; ops with several outputs
// return them all. Attributes are the op's, as strings. The elementwise unary and binary ops get
// theirs from the tables that define them (ops/elementwise/unary_ops.h, binary_ops.h), so an op
// added there has its call here too.
//
//   NDArray h = op::FullyConnected(x, w, b, {{"num_hidden", "128"}});
//   NDArray y = op::relu(h);
//   NDArray s = op::add_n({a, b, c});
//   NDArray z = x + y * 2.0f;   // operators on NDArrays (weft/ops.h)
#pragma once

#include <vector>

#include "ops/elementwise/binary_ops.h"
#include "ops/elementwise/unary_ops.h"
#include "storage/ndarray.h"
#include "weft/imperative.h"

namespace weft::op {

// Any op by name, for ops without a typed call below.
inline std::vector<NDArray> Call(const std::string& name, const std::vector<NDArray>& inputs,
                                 const AttrMap& attrs = {}) {
  return Invoke(name, inputs, attrs);
}

#define WEFT_UNARY_OP(name, ...)                                     \
  inline NDArray name(const NDArray& x, const AttrMap& attrs = {}) { \
    return Invoke(#name, {x}, attrs)[0];                             \
  }
#define WEFT_BINARY_OP(name, ...)                                                      \
  inline NDArray name(const NDArray& a, const NDArray& b, const AttrMap& attrs = {}) { \
    return Invoke(#name, {a, b}, attrs)[0];                                            \
  }

WEFT_UNARY_OPS(WEFT_UNARY_OP)
WEFT_UNARY_OP(Activation)
WEFT_UNARY_OP(clip)  // {{"a_min", "0"}, {"a_max", "6"}}: ReLU6
WEFT_UNARY_OP(gelu)  // {{"approximate", "tanh"}}: GPT-2's
WEFT_BINARY_OPS(WEFT_BINARY_OP)

#undef WEFT_UNARY_OP
#undef WEFT_BINARY_OP

// The sum of several arrays of one shape.
NDArray add_n(const std::vector<NDArray>& inputs);

// Layers: pass the bias, or use the two-input form with {"no_bias", "true"}.
NDArray FullyConnected(const NDArray& data, const NDArray& weight, const NDArray& bias,
                       const AttrMap& attrs);
NDArray FullyConnected(const NDArray& data, const NDArray& weight, const AttrMap& attrs);
NDArray Convolution(const NDArray& data, const NDArray& weight, const NDArray& bias,
                    const AttrMap& attrs);
NDArray Pooling(const NDArray& data, const AttrMap& attrs);
NDArray softmax(const NDArray& data, const AttrMap& attrs = {});
NDArray log_softmax(const NDArray& data, const AttrMap& attrs = {});
// Per-sample loss (N,) of logits (N, C) against class indices (N,).
NDArray SoftmaxCrossEntropy(const NDArray& logits, const NDArray& labels);

// Optimizer updates: write the weight (and the state arrays) in place.
void sgd_update(const NDArray& weight, const NDArray& grad, const AttrMap& attrs);
void sgd_mom_update(const NDArray& weight, const NDArray& grad, const NDArray& mom,
                    const AttrMap& attrs);
void adam_update(const NDArray& weight, const NDArray& grad, const NDArray& mean,
                 const NDArray& var, const AttrMap& attrs);
void adamw_update(const NDArray& weight, const NDArray& grad, const NDArray& mean,
                  const NDArray& var, const AttrMap& attrs);

}  // namespace weft::op

namespace weft {

// Arithmetic on arrays (numpy-style broadcasting) and with scalars.
NDArray operator+(const NDArray& a, const NDArray& b);
NDArray operator-(const NDArray& a, const NDArray& b);
NDArray operator*(const NDArray& a, const NDArray& b);
NDArray operator/(const NDArray& a, const NDArray& b);
NDArray operator-(const NDArray& a);
NDArray operator+(const NDArray& a, double s);
NDArray operator-(const NDArray& a, double s);
NDArray operator*(const NDArray& a, double s);
NDArray operator/(const NDArray& a, double s);
NDArray operator*(double s, const NDArray& a);
NDArray operator-(double s, const NDArray& a);
// In place, on `a`'s memory (b broadcast to a's shape).
NDArray& operator+=(NDArray& a, const NDArray& b);
NDArray& operator-=(NDArray& a, const NDArray& b);
NDArray& operator*=(NDArray& a, const NDArray& b);
NDArray& operator/=(NDArray& a, const NDArray& b);

}  // namespace weft
