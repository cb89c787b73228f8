// Imported ONNX models on gpu:0 against the CPU: every committed model of tests/onnx with its
// inputs (PyTorch 1.13's exports of an MLP, at opsets 13 and 17 and with external data, a CNN at
// two opsets, a CNN with BatchNorm, pooling and Softmax at two opsets, a convolution with its
// BatchNorm kept, nn.TransformerEncoder with a padding mask at two opsets and two batch and
// sequence extents, the GPT of tests/gpt_torch_cases.py at two opsets and two batch sizes; the
// hand-made tensor-op and shape-arithmetic graphs): the same file, the same inputs, float32, the
// outputs within the GPU tolerance of the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "tests/onnx_cases.h"
#include "tests/weft_test_util.h"
#include "weft/onnx.h"

namespace weft {
namespace {

// The model's outputs on gpu:0 within the GPU tolerance of the CPU's, for inputs `name`.
void ExpectGpuMatchesCpu(const std::string& model, const std::string& name) {
  const testing::OnnxCase c = testing::ReadOnnxCase("tests/onnx/" + name + ".json");
  const OnnxModel m = ImportOnnx("tests/onnx/" + model + ".onnx");
  const std::vector<float> cpu = testing::RunOnnxCase(m, c, Device::Cpu()).ToVector<float>();
  const std::vector<float> gpu = testing::RunOnnxCase(m, c, Device::Gpu(0)).ToVector<float>();
  ASSERT_EQ(gpu.size(), cpu.size()) << name;
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(gpu[i], cpu[i], 2e-4 * (1 + std::abs(cpu[i]))) << name << " output " << i;
}

TEST(GpuOnnx, ImportedModelsMatchTheCpu) {
  // (model, inputs): NAME_1 is NAME's file at other extents
  for (const auto& [model, name] :
       std::vector<std::pair<std::string, std::string>>{{"mlp", "mlp"},
                                                        {"mlp_opset17", "mlp_opset17"},
                                                        {"mlp_ext", "mlp_ext"},
                                                        {"cnn", "cnn"},
                                                        {"cnn_opset13", "cnn_opset13"},
                                                        {"bn_cnn", "bn_cnn"},
                                                        {"bn_cnn_opset17", "bn_cnn_opset17"},
                                                        {"conv_bn", "conv_bn"},
                                                        {"encoder", "encoder"},
                                                        {"encoder", "encoder_1"},
                                                        {"encoder_opset17", "encoder_opset17"},
                                                        {"encoder_opset17", "encoder_opset17_1"},
                                                        {"gpt", "gpt"},
                                                        {"gpt", "gpt_1"},
                                                        {"gpt_opset14", "gpt_opset14"},
                                                        {"gpt_opset14", "gpt_opset14_1"},
                                                        {"tensor_ops", "tensor_ops"},
                                                        {"shape_ops", "shape_ops"},
                                                        {"shape_ops", "shape_ops_1"}}) {
    ExpectGpuMatchesCpu(model, name);
  }
}

// With the import's attention fold, each encoder and GPT layer's attention is one Attention that
// reads the packed projection and writes the output projection's rows in place
// (passes/fold_attention_moves.h, layout rows): weft's kernels on the GPU, the CPU's loops.
TEST(GpuOnnx, FoldedAttentionReadingInPlaceMatchesTheCpu) {
  testing::ScopedEnv fold("WEFT_ONNX_FUSE_ATTENTION", "1");
  for (const std::string model : {"encoder", "encoder_opset17", "gpt", "gpt_opset14"}) {
    ExpectGpuMatchesCpu(model, model);
    ExpectGpuMatchesCpu(model, model + "_1");
  }
}

}  // namespace
}  // namespace weft
