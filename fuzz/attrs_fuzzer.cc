// Fuzz target: an op's attribute parsing (ops/attrs.h, Shape::Parse), then its shape and type
// inference on the parsed attributes.
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/targets.h"
#include "ops/op.h"

namespace weft::fuzz {
namespace {

struct Call {
  std::string op;
  std::vector<std::string> shapes;  // attribute text, each parsed by Shape::Parse
  AttrMap attrs;
};

// "op\n(2, 3);(3,)\nkey=value\n..." (see targets.h).
Call ParseCall(const std::string& text) {
  Call call;
  std::istringstream in(text);
  std::getline(in, call.op);
  std::string line;
  std::getline(in, line);
  std::istringstream shapes(line);
  for (std::string shape; std::getline(shapes, shape, ';');) call.shapes.push_back(shape);
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) call.attrs[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return call;
}

// Inference on shapes an op accepted: one shape and one type per output.
void Infer(const Op& op, const Attrs& attrs, const std::vector<Shape>& inputs) {
  std::vector<Shape> outputs;
  try {
    outputs = InferShapes(op, attrs, inputs);
  } catch (const Error&) {
    return;
  }
  if (static_cast<int>(outputs.size()) != NumOutputs(op, attrs))
    Fail("InferShapes gave the wrong number of outputs");
  try {
    const std::vector<DType> types =
        InferTypes(op, attrs, std::vector<DType>(inputs.size(), DType::kFloat32));
    if (types.size() != outputs.size()) Fail("InferTypes gave the wrong number of outputs");
  } catch (const Error&) {
  }
}

}  // namespace

int OpAttrs(const uint8_t* data, size_t size) {
  const Call call = ParseCall(std::string(reinterpret_cast<const char*>(data), size));
  const Op* op = FindOp(call.op);
  if (op == nullptr) return 0;
  try {
    const Attrs attrs = ParseAttrs(*op, call.attrs);
    std::vector<Shape> inputs;
    for (const std::string& text : call.shapes) inputs.push_back(Shape::Parse(text));
    (void)NumInputs(*op, attrs);
    Infer(*op, attrs, inputs);
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace weft::fuzz
