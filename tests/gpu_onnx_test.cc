// Imported ONNX models on gpu:0 against the CPU (tests/onnx: PyTorch 1.13's exports of an MLP, a
// CNN, a CNN with BatchNorm, pooling and Softmax, and nn.TransformerEncoder with a padding mask at
// two batch and sequence extents, and the GPT of tests/gpt_torch_cases.py at two batch sizes): the
// same file, the same inputs, float32, the outputs within the GPU tolerance of the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tests/onnx_cases.h"
#include "weft/onnx.h"

namespace weft {
namespace {

TEST(GpuOnnx, ImportedModelsMatchTheCpu) {
  // (model, inputs): encoder_1 is the encoder's file at other extents
  for (const auto& [model, name] :
       std::vector<std::pair<std::string, std::string>>{{"mlp", "mlp"},
                                                        {"cnn", "cnn"},
                                                        {"bn_cnn", "bn_cnn"},
                                                        {"encoder", "encoder"},
                                                        {"encoder", "encoder_1"},
                                                        {"encoder_opset17", "encoder_opset17"},
                                                        {"gpt", "gpt"},
                                                        {"gpt", "gpt_1"}}) {
    const testing::OnnxCase c = testing::ReadOnnxCase("tests/onnx/" + name + ".json");
    const OnnxModel m = ImportOnnx("tests/onnx/" + model + ".onnx");
    const std::vector<float> cpu = testing::RunOnnxCase(m, c, Device::Cpu()).ToVector<float>();
    const std::vector<float> gpu = testing::RunOnnxCase(m, c, Device::Gpu(0)).ToVector<float>();
    ASSERT_EQ(gpu.size(), cpu.size()) << name;
    for (size_t i = 0; i < cpu.size(); ++i)
      EXPECT_NEAR(gpu[i], cpu[i], 2e-4 * (1 + std::abs(cpu[i]))) << name << " output " << i;
  }
}

}  // namespace
}  // namespace weft
