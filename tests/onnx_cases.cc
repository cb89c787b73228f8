#include "tests/onnx_cases.h"

#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "executor/executor.h"

namespace weft::testing {
namespace {

template <typename T>
void Fill(const NDArray& a, const std::vector<double>& values) {
  const std::vector<T> v(values.begin(), values.end());
  a.SyncCopyFromHost(v.data(), v.size() * sizeof(T));
}

NDArray ArrayOf(const OnnxInput& in, Device device) {
  NDArray a(in.shape, Device::Cpu(), in.dtype);
  if (in.dtype == DType::kBool) Fill<uint8_t>(a, in.values);
  if (in.dtype == DType::kInt64) Fill<int64_t>(a, in.values);
  if (in.dtype == DType::kFloat32) Fill<float>(a, in.values);
  return device.type == DeviceType::kCpu ? a : a.Copy(device);
}

DType DTypeNamed(const std::string& name) {
  return name == "bool" ? DType::kBool : name == "int64" ? DType::kInt64 : DType::kFloat32;
}

}  // namespace

OnnxCase ReadOnnxCase(const std::string& json_path) {
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  OnnxCase c;
  if (j.contains("inputs")) {
    for (const auto& [name, v] : j["inputs"].items()) {
      c.inputs[name] = {v["values"].get<std::vector<double>>(),
                        Shape(v["shape"].get<std::vector<int64_t>>()),
                        DTypeNamed(v["dtype"].get<std::string>())};
    }
  } else {
    c.inputs[""] = {j["input"].get<std::vector<double>>(),
                    Shape(j["input_shape"].get<std::vector<int64_t>>())};
  }
  if (j.contains("output")) {
    c.output = j["output"].get<std::vector<float>>();
    c.output_shape = Shape(j["output_shape"].get<std::vector<int64_t>>());
  }
  return c;
}

NDArray RunOnnxCase(const OnnxModel& m, const OnnxCase& c, Device device) {
  Executor::ArrayMap args;
  for (const auto& [name, a] : m.params)
    args[name] = device.type == DeviceType::kCpu ? a : a.Copy(device);
  for (const auto& [name, input] : c.inputs)
    args[name.empty() ? m.inputs.at(0).name : name] = ArrayOf(input, device);
  const std::unique_ptr<Executor> exec = Executor::Bind(m.symbol, device, args);
  exec->Forward(/*is_train=*/false);
  return exec->outputs()[0];
}

}  // namespace weft::testing
