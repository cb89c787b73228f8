// A residual block and a small ResNet, built as train_resnet builds them (examples/common/
// resnet.h), against PyTorch with the same weights (tests/resnet_torch_cases.py): one training
// step's forward (BatchNorm with the batch's statistics), the running statistics it leaves, and
// the gradient of every parameter and of the data. On the CPU in float64 (to 1e-9) and float32 (to
// 1e-5); on a GPU (gpu_ops_resnet_test) in float32 (to kGpuTolerance) and bfloat16 (to 3e-2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "examples/common/resnet.h"
#include "passes/infer.h"
#include "passes/pipeline.h"
#include "tests/op_test_util.h"
#include "tests/resnet_torch_cases.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::resnet_cases::Case;
using testing::resnet_cases::Tensor;

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// The symbol of a case: the block's output, or the ResNet's per-sample loss.
Symbol SymbolOf(const Case& c) {
  const Symbol data = Symbol::Variable("data");
  if (std::string(c.name) == "block") return examples::BasicBlock(data, "block", 4, 1, false);
  const Symbol logits = examples::ResNet({examples::Stem::kSmall, 4, {1, 1}, 3});
  return Symbol::Op("SoftmaxCrossEntropy", {logits, Symbol::Variable("label")}, {}, "loss");
}

const Tensor& Find(const Case& c, const std::string& name) {
  for (const Tensor& t : c.tensors) {
    if (name == t.name) return t;
  }
  ADD_FAILURE() << c.name << ": no tensor " << name;
  static const Tensor none{"", {}, {}};
  return none;
}

// The tensor in `dtype` on the test's device.
NDArray ArrayOf(const Tensor& t, DType dtype) {
  const Device device = testing::TestDevice();
  if (dtype == DType::kFloat64) return NDArray::FromVector(t.values, Shape(t.shape), device);
  const NDArray f = NDArray::FromVector(std::vector<float>(t.values.begin(), t.values.end()),
                                        Shape(t.shape), device);
  return dtype == DType::kFloat32
             ? f
             : op::Call("Cast", {f}, {{"dtype", std::string(DTypeName(dtype))}})[0];
}

std::vector<double> Values(const NDArray& a) {
  if (a.dtype() == DType::kFloat64) return a.ToVector<double>();
  const NDArray f =
      a.dtype() == DType::kFloat32 ? a : op::Call("Cast", {a}, {{"dtype", "float32"}})[0];
  const std::vector<float> v = f.ToVector<float>();
  return {v.begin(), v.end()};
}

// Largest |got - want| / (1 + |want|) over the elements.
double Error(const NDArray& got, const Tensor& want) {
  const std::vector<double> g = Values(got);
  EXPECT_EQ(g.size(), want.values.size()) << want.name;
  double worst = 0;
  for (size_t i = 0; i < std::min(g.size(), want.values.size()); ++i)
    worst = std::max(worst, std::abs(g[i] - want.values[i]) / (1 + std::abs(want.values[i])));
  return worst;
}

void RunCase(const Case& c, DType dtype, double tolerance) {
  SCOPED_TRACE(std::string(c.name) + " in " + std::string(DTypeName(dtype)));
  const Symbol symbol = SymbolOf(c);
  Executor::ArrayMap args, grads;
  std::map<std::string, GradReq> reqs;
  size_t arguments = 0, moving = 0;
  for (const std::string& name : symbol.ListArguments()) {
    // BatchNorm's statistics stay float32 for bfloat16 data (BnStatType).
    const bool stat = name.find("_bn_") != std::string::npos && dtype == DType::kBFloat16;
    args[name] = ArrayOf(Find(c, name), stat ? DType::kFloat32 : dtype);
    ++arguments;
    if (name.find("moving_") != std::string::npos) ++moving;
    if (name == "label" || name.find("moving_") != std::string::npos) continue;
    grads[name] = NDArray(args[name].shape(), testing::TestDevice(), args[name].dtype());
    reqs[name] = GradReq::kWrite;
  }
  auto exec = Executor::Bind(symbol, testing::TestDevice(), args, grads, reqs);
  exec->Forward(/*is_train=*/true);
  const bool block = std::string(c.name) == "block";
  exec->Backward(block ? std::vector<NDArray>{ArrayOf(Find(c, "out_grad"), dtype)}
                       : std::vector<NDArray>{});
  EXPECT_LE(Error(exec->outputs()[0], Find(c, "output")), tolerance) << "output";
  int checked = 0;
  for (const Tensor& t : c.tensors) {
    const std::string name = t.name;
    if (StartsWith(name, "grad.")) {
      EXPECT_LE(Error(grads.at(name.substr(5)), t), tolerance) << name;
    } else if (StartsWith(name, "after.")) {
      EXPECT_LE(Error(args.at(name.substr(6)), t), tolerance) << name;
    } else {
      continue;
    }
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(grads.size() + moving))
      << "every parameter's gradient and every running statistic is compared";
  EXPECT_EQ(arguments, args.size());
}

// float64 and float32 on the CPU; float32 on a GPU, whose convolutions and sums run in another
// order (cuDNN), and bfloat16 there (8 bits of mantissa in every activation). bfloat16's rounding
// compounds with depth: the block's gradients stay within 3e-2, the whole network's first
// convolutions' weight gradients were 3.5e-2 and 4.4e-2 off on an H200 (stem, stage 1), so the
// network's bound is 6e-2. bfloat16 runs channels last (the GPU's default) and NCHW
// (WEFT_GPU_CHANNELS_LAST=0).
TEST(ResNetAgainstPyTorch, BlockAndNetworkInEveryFloatType) {
  const bool gpu = testing::TestDevice().is_gpu();
  std::vector<DType> dtypes = testing::TestFloatTypes();
  if (gpu) dtypes.push_back(DType::kBFloat16);
  for (DType dtype : dtypes) {
    for (const Case& c : testing::resnet_cases::Cases()) {
      const bool network = std::string(c.name) != "block";
      const double tolerance = dtype == DType::kFloat64    ? 1e-9
                               : dtype == DType::kBFloat16 ? (network ? 6e-2 : 3e-2)
                               : gpu                       ? testing::kGpuTolerance
                                                           : 1e-5;
      RunCase(c, dtype, tolerance);
      if (gpu && dtype == DType::kBFloat16) {  // and NCHW (passes/channels_last.h)
        testing::ScopedEnv off("WEFT_GPU_CHANNELS_LAST", "0");
        RunCase(c, dtype, tolerance);
      }
    }
  }
}

// ResNet-50 as torchvision.models.resnet50() builds it: its 25,557,032 parameters (BatchNorm's
// running statistics not among them), and the shapes where a bottleneck widens and projects.
TEST(ResNetShapes, ResNet50HasTorchvisionsParameters) {
  const Symbol logits = examples::ResNet(examples::ResNet50(1000, examples::Stem::kImageNet));
  const std::map<std::string, Shape> shapes =
      InferArgumentShapes(logits.ToGraph(), {{"data", Shape{2, 3, 224, 224}}});
  const auto ends_with = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  int64_t parameters = 0;
  for (const auto& [name, shape] : shapes) {
    if (name != "data" && !ends_with(name, "_moving_mean") && !ends_with(name, "_moving_var"))
      parameters += shape.Size();
  }
  EXPECT_EQ(parameters, 25557032);
  EXPECT_EQ(shapes.at("stage1_block1_proj_conv_weight"), Shape({256, 64, 1, 1}));
  EXPECT_EQ(shapes.at("stage2_block1_b_conv_weight"), Shape({128, 128, 3, 3}));
  EXPECT_EQ(shapes.at("stage4_block3_c_conv_weight"), Shape({2048, 512, 1, 1}));
  EXPECT_EQ(shapes.at("fc_weight"), Shape({1000, 2048}));
}

// A bfloat16 network (ResNetConfig::dtype): float32 data is cast in, the logits come out float32,
// and every layer between types with the arguments a bfloat16 Trainer holds: parameters in
// bfloat16, BatchNorm's running statistics (auxiliary states) in float32.
TEST(ResNetShapes, ABfloat16NetworkTakesFloat32DataAndGivesFloat32Logits) {
  examples::ResNetConfig config{examples::Stem::kSmall, 4, {1, 1}, 3};
  config.dtype = DType::kBFloat16;
  const Symbol logits = examples::ResNet(config);
  std::map<std::string, DType> dtypes;
  const std::vector<std::string> aux = Executor::MutatedArguments(logits);
  for (const std::string& name : logits.ListArguments()) {
    if (name == "data") continue;
    const bool running = std::find(aux.begin(), aux.end(), name) != aux.end();
    dtypes[name] = running ? DType::kFloat32 : DType::kBFloat16;
  }
  EXPECT_EQ(aux.size(), 2u * 6) << "six BatchNorms, two running statistics each";
  const Graph typed = InferShapesAndTypes(logits.ToGraph(), {{"data", Shape{2, 3, 8, 8}}}, dtypes);
  const uint32_t out = typed.EntryId(typed.outputs()[0]);
  EXPECT_EQ(typed.dtypes()[out], DType::kFloat32);
  EXPECT_EQ(typed.shapes()[out], Shape({2, 3}));
}

// On a GPU, a bind that computes in 16 bits (16-bit arguments, or a precision policy) runs its
// convolutions and poolings channels last (passes/channels_last.h, before the gradient pass), so
// that cuDNN's tensor-core kernels read the images as they lie; a float32 bind keeps NCHW, and so
// does every bind with WEFT_GPU_CHANNELS_LAST=0 or WEFT_CHANNELS_LAST=0.
TEST(ResNetShapes, GpuBindsThatComputeIn16BitsAreChannelsLast) {
  if (!testing::TestDevice().is_gpu()) GTEST_SKIP() << "the CPU's training binds block instead";
  // The windows turned channels last when the network's weights are `dtype` (a 16-bit network
  // casts its data in), with a bfloat16 precision policy or not.
  const auto channels_last = [](DType dtype, bool policy, int* windows) {
    examples::ResNetConfig config{examples::Stem::kSmall, 4, {1, 1}, 3};
    config.dtype = dtype;
    const Graph graph =
        Symbol::Op("SoftmaxCrossEntropy", {examples::ResNet(config), Symbol::Variable("label")}, {},
                   "loss")
            .ToGraph();
    *windows = 0;
    for (const Node& n : graph.nodes())
      *windows += n.op != nullptr && (n.op->name == "Convolution" || n.op->name == "Pooling");
    BindRequest request;
    request.device = testing::TestDevice();
    for (uint32_t n : graph.ArgumentNodes()) {
      const std::string& name = graph.node(n).name;
      if (name == "data" || name == "label" || name.find("moving_") != std::string::npos) continue;
      request.differentiate.insert(name);
      // BatchNorm's scale and shift in float32, as for 16-bit data they must be (float16) or may
      request.dtypes[name] = name.find("_bn_") != std::string::npos ? DType::kFloat32 : dtype;
    }
    request.shapes = InferArgumentShapes(graph, {{"data", Shape{4, 3, 8, 8}}, {"label", Shape{4}}},
                                         request.dtypes);
    if (policy) request.precision = PrecisionPolicy{.low = DType::kBFloat16};
    return RunBindPipeline(graph, request).channels_last;
  };
  int windows = 0;
  EXPECT_EQ(channels_last(DType::kBFloat16, false, &windows), windows) << "on by default";
  {
    testing::ScopedEnv off("WEFT_GPU_CHANNELS_LAST", "0");
    EXPECT_EQ(channels_last(DType::kBFloat16, false, &windows), 0);
  }
  EXPECT_EQ(windows, 7) << "six convolutions and the global pooling";
  EXPECT_EQ(channels_last(DType::kFloat16, false, &windows), windows);
  EXPECT_EQ(channels_last(DType::kFloat32, true, &windows), windows);
  EXPECT_EQ(channels_last(DType::kFloat32, false, &windows), 0);
  testing::ScopedEnv off("WEFT_CHANNELS_LAST", "0");
  EXPECT_EQ(channels_last(DType::kBFloat16, false, &windows), 0);
}

// The small ResNet in bfloat16 through weft::Trainer on the GPU (the CPU has no bfloat16
// convolution or optimizer update): parameters in bfloat16, BatchNorm's running statistics in
// float32 (auxiliary states of a bfloat16 trainer), which training moves and Save and Load keep.
TEST(ResNetTrainer, ABfloat16TrainerKeepsRunningStatisticsInFloat32) {
  const Device device = testing::TestDevice();
  if (!device.is_gpu()) GTEST_SKIP() << "bfloat16 training runs on a GPU";
  examples::ResNetConfig config{examples::Stem::kSmall, 4, {1, 1}, 3};
  config.dtype = DType::kBFloat16;
  const Symbol loss = Symbol::Op("SoftmaxCrossEntropy",
                                 {examples::ResNet(config), Symbol::Variable("label")}, {}, "loss");
  const std::map<std::string, Shape> shapes = {{"data", Shape{4, 3, 8, 8}}, {"label", Shape{4}}};
  const TrainerOptions options{.device = device, .dtype = DType::kBFloat16};
  Trainer trainer(loss, shapes, Xavier(), SGD(0.1, 0.9, 0, 0.25), options);
  for (const std::string& p : trainer.parameter_names())
    EXPECT_EQ(trainer.parameter(p).dtype(), DType::kBFloat16) << p;
  ASSERT_EQ(trainer.auxiliary_names().size(), 12u);
  for (const std::string& a : trainer.auxiliary_names())
    EXPECT_EQ(trainer.auxiliary(a).dtype(), DType::kFloat32) << a;
  trainer.data("data").FillNormal(0, 1);
  NDArray::FromVector(std::vector<float>{0, 1, 2, 1}, Shape{4}).CopyTo(trainer.data("label"));
  for (int k = 0; k < 3; ++k) trainer.Step();
  const std::vector<float> mean = trainer.auxiliary("stem_bn_moving_mean").ToVector<float>();
  EXPECT_NE(mean, std::vector<float>(4, 0.0f)) << "a training step moves the running mean";
  const std::string path = testing::TempPath("bf16_resnet.safetensors");
  trainer.Save(path);
  Trainer loaded(loss, shapes, Xavier(), SGD(0.1, 0.9, 0, 0.25), options);
  loaded.Load(path);
  EXPECT_EQ(loaded.auxiliary("stem_bn_moving_mean").ToVector<float>(), mean);
}

}  // namespace
}  // namespace weft
