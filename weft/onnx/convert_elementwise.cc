// Converters of ONNX's elementwise ops and constants: arithmetic with numpy broadcasting (ONNX's
// multidirectional broadcasting is numpy's), unary functions, Identity, Dropout (inference), and
// Constant. Integer arithmetic on known tensors (shape arithmetic) is convert_shape.cc's.
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "weft/onnx/importer.h"
#include "weft/onnx/reader.h"

namespace weft::onnx_import {
namespace {

// A converter that runs weft's `op` on every input.
Converter Elementwise(const std::string& op) {
  return [op](NodeContext& n) {
    std::vector<Symbol> in;
    for (int i = 0; i < n.node().input_size(); ++i) in.push_back(n.Input(i));
    return std::vector<Value>{Value::Of(n.Op(op, in))};
  };
}

// weft's `op` on the two inputs (on known integers: convert_shape.cc; a division by a known zero
// is an error, not a value).
Converter Arithmetic(const std::string& op, bool divides = false) {
  return [op, divides](NodeContext& n) {
    const HostTensor* divisor = n.Known(1);
    if (divides && divisor != nullptr && divisor->dtype == DType::kInt64) {
      for (int64_t v : divisor->Int64s())
        if (v == 0) n.Fail("expected integer divisors other than 0, found 0");
    }
    return std::vector<Value>{Value::Of(n.Op(op, {n.Input(0), n.Input(1)}))};
  };
}

std::vector<Value> Identity(NodeContext& n) {
  if (const HostTensor* t = n.Known(0)) return {Value::Of(*t)};
  return {Value::Of(n.Input(0))};
}

// Dropout at inference passes its input through; its mask output is not produced.
std::vector<Value> DropoutAtInference(NodeContext& n) {
  if (n.node().output_size() > 1 && !n.node().output(1).empty())
    n.Fail("expected no mask output (inference), found '" + n.node().output(1) + "'");
  if (n.HasInput(2) && (!n.Known(2) || n.Known(2)->Size() != 1 || n.Known(2)->Int64s()[0] != 0))
    n.Fail("expected training_mode false (inference import), found it true or computed");
  return Identity(n);
}

// min(max(x, lo), hi): from opset 11 the bounds are optional inputs (known at import), before it
// attributes; a missing bound is no bound.
std::vector<Value> Clip(NodeContext& n) {
  std::optional<double> lo, hi;
  if (n.opset() >= 11) {
    if (n.HasInput(1)) lo = n.Scalar(1, "the lower bound");
    if (n.HasInput(2)) hi = n.Scalar(2, "the upper bound");
  } else {
    if (n.HasAttr("min")) lo = n.Float("min", 0);
    if (n.HasAttr("max")) hi = n.Float("max", 0);
  }
  Symbol x = n.Input(0);
  // ReLU6 (MobileNet's) is an op of its own, which a convolution takes as its epilogue
  if (lo && hi && *lo == 0 && *hi == 6) return {Value::Of(n.Op("relu6", {x}))};
  if (lo && hi)
    return {Value::Of(n.Op("clip", {x}, {{"a_min", Number(*lo)}, {"a_max", Number(*hi)}}))};
  if (lo) x = n.Op("maximum_scalar", {x}, {{"scalar", Number(*lo)}});
  if (hi) x = n.Op("minimum_scalar", {x}, {{"scalar", Number(*hi)}});
  return {Value::Of(x)};
}

std::vector<Value> Constant(NodeContext& n) {
  if (const onnx::TensorProto* t = n.TensorAttr("value")) return {Value::Of(TensorOf(*t, ""))};
  if (n.HasAttr("value_float"))
    return {Value::Of(HostTensor::OfFloats({n.Float("value_float", 0)}, {}))};
  if (n.HasAttr("value_floats")) {
    n.Fail(
        "attribute 'value_floats' is not read yet; expected 'value', 'value_float', "
        "'value_int' or 'value_ints'");
  }
  if (n.HasAttr("value_int")) return {Value::Of(HostTensor::OfInt64s({n.Int("value_int", 0)}, {}))};
  if (n.HasAttr("value_ints")) {
    const std::vector<int64_t> v = n.Ints("value_ints", {});
    return {Value::Of(HostTensor::OfInt64s(v, {static_cast<int64_t>(v.size())}))};
  }
  n.Fail("expected one of the attributes 'value', 'value_float', 'value_int', 'value_ints'");
}

}  // namespace

void AddElementwiseConverters(ConverterTable& t) {
  t["Add"] = Arithmetic("add");
  t["Sub"] = Arithmetic("sub");
  t["Mul"] = Arithmetic("mul");
  t["Div"] = Arithmetic("div", /*divides=*/true);
  for (const auto& [onnx_op, weft_op] :
       std::vector<std::pair<const char*, const char*>>{{"Relu", "relu"},
                                                        {"Sigmoid", "sigmoid"},
                                                        {"Tanh", "tanh"},
                                                        {"Erf", "erf"},
                                                        {"Sqrt", "sqrt"},
                                                        {"Exp", "exp"},
                                                        {"Log", "log"},
                                                        {"Neg", "neg"},
                                                        {"Abs", "abs"}}) {
    t[onnx_op] = Elementwise(weft_op);
  }
  t["Clip"] = Clip;
  t["Identity"] = Identity;
  t["Dropout"] = DropoutAtInference;
  t["Constant"] = Constant;
}

}  // namespace weft::onnx_import
