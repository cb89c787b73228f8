// Imported ONNX models on gpu:0 against the CPU (tests/onnx: PyTorch 1.13's exports of an MLP, a
// CNN, and a CNN with BatchNorm, pooling and Softmax): the same file, the same input, float32, the
// outputs within the GPU tolerance of the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "executor/executor.h"
#include "weft/onnx.h"

namespace weft {
namespace {

std::vector<float> Outputs(const OnnxModel& m, const std::vector<float>& input, const Shape& shape,
                           Device device) {
  Executor::ArrayMap args;
  for (const auto& [name, a] : m.params) args[name] = a.Copy(device);
  args[m.inputs[0].name] = NDArray::FromVector(input, shape, device);
  const std::unique_ptr<Executor> exec = Executor::Bind(m.symbol, device, args);
  exec->Forward(/*is_train=*/false);
  return exec->outputs()[0].ToVector<float>();
}

TEST(GpuOnnx, ImportedModelsMatchTheCpu) {
  for (const char* name : {"mlp", "cnn", "bn_cnn"}) {
    const std::string prefix = std::string("tests/onnx/") + name;
    std::ifstream in(prefix + ".json");
    const nlohmann::json j = nlohmann::json::parse(in);
    const std::vector<float> input = j["input"].get<std::vector<float>>();
    const Shape shape(j["input_shape"].get<std::vector<int64_t>>());
    const OnnxModel m = ImportOnnx(prefix + ".onnx");
    const std::vector<float> cpu = Outputs(m, input, shape, Device::Cpu());
    const std::vector<float> gpu = Outputs(m, input, shape, Device::Gpu(0));
    ASSERT_EQ(gpu.size(), cpu.size()) << name;
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_NEAR(gpu[i], cpu[i], 2e-4 * (1 + std::abs(cpu[i]))) << name << " output " << i;
  }
}

}  // namespace
}  // namespace weft
