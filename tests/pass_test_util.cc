#include "tests/pass_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "tests/weft_test_util.h"

namespace weft::testing {

size_t CountOps(const Graph& g, const std::string& op) {
  return std::count_if(g.nodes().begin(), g.nodes().end(),
                       [&](const Node& n) { return n.op != nullptr && n.op->name == op; });
}

Executor::ArrayMap RandomArguments(const Symbol& s, const std::map<std::string, Shape>& shapes,
                                   DType dtype) {
  Executor::ArrayMap args;
  for (const auto& [name, shape] : InferArgumentShapes(s.ToGraph(), shapes)) {
    args[name] = NDArray(shape, Device::Cpu(), dtype);
    args[name].FillUniform(-1, 1);
  }
  return args;
}

std::vector<std::vector<double>> InferOutputs(const Symbol& s, const Executor::ArrayMap& args,
                                              const char* pass, bool on) {
  ScopedEnv env(pass, on ? "1" : "0");
  auto exec = Executor::Bind(s, Device::Cpu(), args);
  exec->Forward(/*is_train=*/false);
  std::vector<std::vector<double>> outs;
  for (const NDArray& out : exec->outputs()) {
    if (out.dtype() == DType::kFloat64) {
      outs.push_back(out.ToVector<double>());
    } else {
      const std::vector<float> f = out.ToVector<float>();
      outs.emplace_back(f.begin(), f.end());
    }
  }
  return outs;
}

void ExpectPassKeepsOutputs(const Symbol& s, const Shape& data, const char* pass) {
  const Executor::ArrayMap args = RandomArguments(s, {{"data", data}});
  const auto off = InferOutputs(s, args, pass, false);
  const auto on = InferOutputs(s, args, pass, true);
  ASSERT_EQ(on.size(), off.size());
  for (size_t o = 0; o < on.size(); ++o) EXPECT_EQ(on[o], off[o]) << pass << ": output " << o;
}

Symbol Reshape(const Symbol& x, const std::vector<int64_t>& shape) {
  return Symbol::Op("reshape", {x}, {{"shape", FormatTuple(shape)}});
}
Symbol Transpose(const Symbol& x, const std::vector<int64_t>& axes) {
  return Symbol::Op("transpose", {x}, {{"axes", FormatTuple(axes)}});
}
Symbol Slice(const Symbol& x, int64_t axis, int64_t begin, int64_t end) {
  return Symbol::Op("slice", {x},
                    {{"begin", FormatTuple({begin})},
                     {"end", FormatTuple({end})},
                     {"axes", FormatTuple({axis})}});
}

BindResult BindCpu(const Symbol& s, const Shape& data, std::set<std::string> differentiate) {
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = {{"data", data}};
  request.differentiate = std::move(differentiate);
  return RunBindPipeline(s.ToGraph(), request);
}

}  // namespace weft::testing
