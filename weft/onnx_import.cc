// ImportOnnx (weft/onnx.h): the model read (onnx/reader.h), its initializers as known values, its
// inputs as variables, then each node through its converter (onnx/importer.h) in the file's order
// (ONNX stores nodes topologically sorted), and the outputs grouped.
#include <algorithm>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/text.h"
#include "weft/onnx.h"
#include "weft/onnx/importer.h"
#include "weft/onnx/reader.h"

namespace weft {
namespace {

using onnx_import::ImportState;
using onnx_import::NodeContext;
using onnx_import::Value;

constexpr int64_t kMinOpset = 11, kMaxOpset = 17;

int64_t DefaultOpset(const onnx::ModelProto& m, const std::string& path) {
  for (const onnx::OperatorSetIdProto& o : m.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") {
      if (o.version() < kMinOpset || o.version() > kMaxOpset) {
        WEFT_THROW("ImportOnnx: '" << path << "': expected opset " << kMinOpset << " to "
                                   << kMaxOpset << " of the default domain, found " << o.version());
      }
      return o.version();
    }
  }
  WEFT_THROW("ImportOnnx: '" << path
                             << "': expected an opset_import of the default domain, found none");
}

// Every name the graph uses is UTF-8, as ONNX requires (weft's graphs write them to JSON).
void CheckNames(const onnx::GraphProto& g, const std::string& path) {
  const auto check = [&](const std::string& name, const char* what) {
    if (!IsUtf8(name)) {
      WEFT_THROW("ImportOnnx: '" << path << "': expected names of valid UTF-8, found the " << what
                                 << " name '" << Abbreviate(name) << "'");
    }
  };
  for (const onnx::TensorProto& t : g.initializer()) check(t.name(), "initializer");
  for (const onnx::ValueInfoProto& v : g.input()) check(v.name(), "input");
  for (const onnx::ValueInfoProto& v : g.output()) check(v.name(), "output");
  for (const onnx::NodeProto& n : g.node()) {
    check(n.name(), "node");
    check(n.op_type(), "op type");
    for (const std::string& x : n.input()) check(x, "value");
    for (const std::string& x : n.output()) check(x, "value");
  }
}

OnnxTensorInfo InfoOf(const onnx::ValueInfoProto& v) {
  OnnxTensorInfo info{v.name()};
  if (!v.type().has_tensor_type()) return info;
  const onnx::TypeProto::Tensor& t = v.type().tensor_type();
  info.dtype = onnx_import::DTypeOfOnnx(t.elem_type(), "ONNX graph value '" + v.name() + "'");
  for (const onnx::TensorShapeProto::Dimension& d : t.shape().dim()) {
    info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    info.dim_names.push_back(d.has_dim_param() ? d.dim_param() : "");
  }
  return info;
}

// The input's extents for shape arithmetic: numbers, and a variable per symbolic extent (one per
// name: inputs that share "batch" share it).
void AddSymbolicInput(const OnnxTensorInfo& info, onnx_import::SymbolicInputs& inputs) {
  std::vector<onnx_import::SymDim> dims;
  for (size_t axis = 0; axis < info.dims.size(); ++axis) {
    if (info.dims[axis] >= 0) {
      dims.push_back(onnx_import::SymDim::Of(info.dims[axis]));
      continue;
    }
    const std::string name = info.dim_names[axis].empty()
                                 ? info.name + "[" + std::to_string(axis) + "]"
                                 : info.dim_names[axis];
    int var = 0;
    while (var < static_cast<int>(inputs.vars.size()) && inputs.vars[var].name != name) ++var;
    if (var == static_cast<int>(inputs.vars.size()))
      inputs.vars.push_back({name, info.name, static_cast<int>(axis)});
    dims.push_back(onnx_import::SymDim::Var(var));
  }
  inputs.dims[info.name] = dims;
  inputs.dtypes[info.name] = info.dtype;
}

void ConvertNode(const onnx::NodeProto& node, ImportState& state) {
  NodeContext n(node, state);
  if (!node.domain().empty() && node.domain() != "ai.onnx")
    n.Fail("expected an op of the default domain, found domain '" + node.domain() + "'");
  const auto& table = onnx_import::Converters();
  const auto it = table.find(node.op_type());
  if (it == table.end()) {
    const std::vector<std::string> supported = SupportedOnnxOps();
    n.Fail("weft does not run the operator '" + node.op_type() + "'; it runs " +
           QuotedList(supported, supported.size()));
  }
  std::vector<Value> out = it->second(n);
  for (int i = 0; i < node.output_size(); ++i) {
    if (node.output(i).empty()) continue;
    if (i >= static_cast<int>(out.size()))
      n.Fail("expected at most " + std::to_string(out.size()) + " outputs, found a use of output " +
             std::to_string(i));
    state.values[node.output(i)] = out[i];
  }
}

}  // namespace

std::vector<std::string> SupportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto& [name, converter] : onnx_import::Converters()) ops.push_back(name);
  return ops;
}

OnnxModel ImportOnnx(const std::string& path, const OnnxOptions&) {
  const onnx::ModelProto m = onnx_import::ReadModel(path);
  ImportState state;
  state.dir = std::filesystem::path(path).parent_path().string();
  state.opset = DefaultOpset(m, path);
  const onnx::GraphProto& g = m.graph();
  CheckNames(g, path);
  std::set<std::string> initializers;
  for (const onnx::TensorProto& t : g.initializer()) {
    state.values[t.name()] = Value::Of(onnx_import::TensorOf(t, state.dir));
    initializers.insert(t.name());
  }
  OnnxModel model;
  model.opset = state.opset;
  model.producer =
      m.producer_name() + (m.producer_version().empty() ? "" : " " + m.producer_version());
  for (const onnx::ValueInfoProto& v : g.input()) {
    if (initializers.contains(v.name())) continue;
    model.inputs.push_back(InfoOf(v));
    AddSymbolicInput(model.inputs.back(), state.inputs);
    Symbol input = Symbol::Variable(v.name());
    if (model.inputs.back().dtype == DType::kBool)  // bools travel as uint8 0 and 1 (weft's ops
      input = Symbol::Op("Cast", {input}, {{"dtype", "uint8"}}, v.name() + "_uint8");  // move it)
    state.values[v.name()] = Value::Of(input);
  }
  for (const onnx::NodeProto& node : g.node())
    for (const std::string& x : node.input()) ++state.uses[x];
  for (const onnx::ValueInfoProto& v : g.output()) ++state.uses[v.name()];
  for (const onnx::NodeProto& node : g.node()) ConvertNode(node, state);
  std::vector<Symbol> outputs;
  for (const onnx::ValueInfoProto& v : g.output()) {
    const auto it = state.values.find(v.name());
    if (it == state.values.end())
      WEFT_THROW("ImportOnnx: '" << path << "': graph output '" << v.name()
                                 << "' is computed by no node");
    if (!it->second.symbol) {  // a known tensor, or shape arithmetic
      WEFT_THROW("ImportOnnx: '" << path << "': graph output '" << v.name()
                                 << "' is known at import (a constant expression); expected "
                                    "outputs that depend on the graph's inputs");
    }
    outputs.push_back(*it->second.symbol);
    model.outputs.push_back(InfoOf(v));
  }
  if (outputs.empty())
    WEFT_THROW("ImportOnnx: '" << path << "': expected a graph output, found none");
  model.symbol = outputs.size() == 1 ? outputs[0] : Symbol::Group(outputs);
  // the parameters the graph reads: a step folded away at import (an attention's scale,
  // convert_attention.cc) leaves its known operand unread
  for (const std::string& name : model.symbol.ListArguments()) {
    auto it = state.params.find(name);
    if (it != state.params.end()) model.params.emplace(name, std::move(it->second));
  }
  return model;
}

}  // namespace weft
