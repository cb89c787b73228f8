#include "weft/onnx/importer.h"

#include <cstring>
#include <sstream>

#include "core/error.h"
#include "weft/onnx/reader.h"

namespace weft::onnx_import {
namespace {

// A known tensor as a CPU array of its dtype.
NDArray ArrayOf(const HostTensor& t) {
  NDArray a(t.ShapeOf(), Device::Cpu(), t.dtype);
  if (!t.bytes.empty()) a.SyncCopyFromHost(t.bytes.data(), t.bytes.size());
  return a;
}

}  // namespace

Symbol NodeContext::Input(int i) {
  if (!HasInput(i)) Fail("expected input " + std::to_string(i) + ", found none");
  const std::string& name = node_.input(i);
  auto it = state_.values.find(name);
  if (it == state_.values.end())
    Fail("input '" + name + "' is neither a graph input, an initializer nor an earlier output");
  Value& v = it->second;
  if (v.dims) {
    std::string extents;
    for (const SymDim& d : v.dims->values) extents += (extents.empty() ? "" : ", ") + Text(d);
    Fail("input '" + name + "' is shape arithmetic on symbolic extents (" + extents +
         "), which weft folds into the ops that read it (Reshape, Expand, Slice, "
         "ConstantOfShape) and does not compute at run time");
  }
  if (!v.symbol) {  // a known tensor the graph reads: a parameter
    state_.params[name] = ArrayOf(*v.constant);
    v.symbol = Symbol::Variable(name);
  }
  return *v.symbol;
}

const Value* NodeContext::ValueOf(int i) const {
  if (!HasInput(i)) return nullptr;
  const auto it = state_.values.find(node_.input(i));
  return it == state_.values.end() ? nullptr : &it->second;
}

int NodeContext::Uses(int i) const {
  const auto it = HasInput(i) ? state_.uses.find(node_.input(i)) : state_.uses.end();
  return it == state_.uses.end() ? 0 : it->second;
}

const HostTensor* NodeContext::Known(int i) const {
  if (!HasInput(i)) return nullptr;
  const auto it = state_.values.find(node_.input(i));
  return it == state_.values.end() || !it->second.constant ? nullptr : &*it->second.constant;
}

const HostTensor& NodeContext::RequireKnown(int i, const std::string& what) const {
  const HostTensor* t = Known(i);
  if (t == nullptr) {
    Fail("expected " + what + " (input " + std::to_string(i) +
         ") to be known at import (an initializer or a constant expression), found a value "
         "computed at run time");
  }
  return *t;
}

double NodeContext::Scalar(int i, const std::string& what) const {
  const HostTensor& t = RequireKnown(i, what);
  if (t.Size() != 1) Fail("expected " + what + " to be one value, found " + t.ShapeOf().ToString());
  return t.Doubles()[0];
}

std::optional<DimTensor> NodeContext::Integers(int i) const {
  if (!HasInput(i)) return std::nullopt;
  const auto it = state_.values.find(node_.input(i));
  if (it == state_.values.end()) return std::nullopt;
  if (it->second.dims) return it->second.dims;
  const std::optional<HostTensor>& t = it->second.constant;
  // Shape arithmetic is on shapes: a larger integer vector (positions, indices) is a value, left
  // to the converters of values computed at run time (folding millions of extents one by one
  // would take seconds).
  constexpr int64_t kMaxShapeValues = int64_t{1} << 16;
  if (!t || t->dims.size() > 1 || (t->dtype != DType::kInt64 && t->dtype != DType::kInt32) ||
      t->Size() > kMaxShapeValues)
    return std::nullopt;
  return DimTensor::Of(*t);
}

std::vector<SymDim> NodeContext::ShapeOf(const Symbol& x, const std::string& what) const {
  std::vector<SymDim> out;
  const SymbolicType t = InferSymbolic(x, state_.inputs, state_.params);
  for (size_t i = 0; i < t.dims.size(); ++i) {
    if (!t.dims[i]) {
      Fail("extent " + std::to_string(i) + " of " + what +
           " depends on the graph's symbolic extents in a way weft does not follow at import "
           "(expected a product such as 4*batch); give the input fixed extents");
    }
    out.push_back(*t.dims[i]);
  }
  return out;
}

DType NodeContext::DTypeOf(const Symbol& x) const {
  return InferDType(x, state_.inputs, state_.params);
}

NodeContext::VarSource NodeContext::SourceOf(int var) const {
  const DimVar& v = state_.inputs.vars.at(var);
  return {v.input, *state_.values.at(v.input).symbol, v.axis};
}

std::string NodeContext::Name() const {
  if (!node_.name().empty()) return node_.name();
  return node_.output_size() > 0 ? node_.output(0) : node_.op_type();
}

Symbol NodeContext::Parameter(const std::string& suffix, const HostTensor& t) {
  std::string name = Name() + "_" + suffix;
  while (state_.params.contains(name) || state_.values.contains(name)) name += "_";
  state_.params[name] = ArrayOf(t);
  return Symbol::Variable(name);
}

const onnx::AttributeProto* NodeContext::Attr(const std::string& name) const {
  for (const onnx::AttributeProto& a : node_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

bool NodeContext::HasAttr(const std::string& name) const { return Attr(name) != nullptr; }

int64_t NodeContext::Int(const std::string& name, int64_t fallback) const {
  const onnx::AttributeProto* a = Attr(name);
  return a == nullptr ? fallback : a->i();
}

float NodeContext::Float(const std::string& name, float fallback) const {
  const onnx::AttributeProto* a = Attr(name);
  return a == nullptr ? fallback : a->f();
}

std::string NodeContext::String(const std::string& name, const std::string& fallback) const {
  const onnx::AttributeProto* a = Attr(name);
  return a == nullptr ? fallback : a->s();
}

std::vector<int64_t> NodeContext::Ints(const std::string& name,
                                       std::vector<int64_t> fallback) const {
  const onnx::AttributeProto* a = Attr(name);
  return a == nullptr ? fallback : std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

const onnx::TensorProto* NodeContext::TensorAttr(const std::string& name) const {
  const onnx::AttributeProto* a = Attr(name);
  return a == nullptr || !a->has_t() ? nullptr : &a->t();
}

Symbol NodeContext::Op(const std::string& op, const std::vector<Symbol>& inputs,
                       const AttrMap& attrs) {
  std::string name = node_.name().empty() ? node_.op_type() + "_" + Name() : node_.name();
  const int n = state_.node_names[name]++;
  if (n > 0) name += "_" + std::to_string(n);
  return Symbol::Op(op, inputs, attrs, name);
}

std::string NodeContext::Where() const {
  return "ONNX node '" + Name() + "' (" + node_.op_type() + ", opset " +
         std::to_string(state_.opset) + ")";
}

void NodeContext::Fail(const std::string& message) const { WEFT_THROW(Where() << ": " << message); }
void NodeContext::Unsupported(const std::string& attr, const std::string& found,
                              const std::string& expected) const {
  Fail("attribute '" + attr + "': expected " + expected + ", found " + found);
}

const ConverterTable& Converters() {
  static const ConverterTable table = [] {
    ConverterTable t;
    AddElementwiseConverters(t);
    AddNnConverters(t);
    AddTensorConverters(t);
    AddShapeConverters(t);
    AddAttentionConverters(t);
    return t;
  }();
  return table;
}

std::vector<int64_t> AxesOf(NodeContext& n, int input, int64_t opset_as_input) {
  if (n.opset() >= opset_as_input) {
    return n.HasInput(input) ? n.RequireKnown(input, "the axes").Int64s() : std::vector<int64_t>{};
  }
  return n.Ints("axes", {});
}

int64_t Normalized(NodeContext& n, int64_t axis, int64_t rank) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    n.Fail("expected an axis in [" + std::to_string(-rank) + ", " + std::to_string(rank) +
           "), found " + std::to_string(axis));
  return a;
}

std::string Tuple(const std::vector<int64_t>& values) {
  std::ostringstream s;
  s << "(";
  for (size_t i = 0; i < values.size(); ++i) s << (i ? ", " : "") << values[i];
  s << (values.size() == 1 ? ",)" : ")");
  return s.str();
}

std::string Number(double value) {
  std::ostringstream s;
  s.precision(17);
  s << value;
  return s.str();
}

}  // namespace weft::onnx_import
