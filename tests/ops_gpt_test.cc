// The GPT train_gpt trains (examples/common/gpt.h), 2 layers, against PyTorch with the same
// weights and tokens (tests/gpt_torch_cases.py), as llm.c checks its model: the per-token loss and
// every parameter's gradient (float64 to 1e-9, float32 to 1e-5), then ten training steps as
// train_gpt takes them (the trainer with AdamW decaying the matrices only, a warm-up and cosine
// rate, gradients clipped to global norm 1), whose losses and final parameters track PyTorch's
// (float32, to 1e-4); and, on a GPU, the model in bfloat16 (parameters and activations; float32
// token ids, positions, labels and loss) within bfloat16's rounding. On a GPU (gpu_ops_gpt_test) in
// float32 to kGpuTolerance, once every op of the model has a GPU compute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "examples/common/gpt.h"
#include "examples/common/gpt_generate.h"
#include "tests/gpt_torch_cases.h"
#include "tests/op_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

namespace cases = testing::gpt_cases;
using cases::Tensor;

examples::GptConfig Config() {
  return {.vocab = cases::kVocab,
          .context = cases::kContext,
          .layers = cases::kLayers,
          .heads = cases::kHeads,
          .width = cases::kWidth,
          .dropout = 0};
}

const Tensor& Find(const std::string& name) {
  for (const Tensor& t : cases::Tensors()) {
    if (name == t.name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  static const Tensor none{"", {}, {}};
  return none;
}

NDArray ArrayOf(const Tensor& t, DType dtype) {
  return testing::ArrayOf(t.values, Shape(t.shape), dtype);
}

NDArray Positions(DType dtype) {
  const std::vector<float> p = examples::Positions(cases::kTime);
  return testing::ArrayOf({p.begin(), p.end()}, Shape{cases::kTime}, dtype);
}

// Largest |got - want| / (1 + |want|).
double Error(const NDArray& got, const Tensor& want) {
  const testing::Values g = testing::ValuesOf(got);
  EXPECT_EQ(g.size(), want.values.size()) << want.name;
  double worst = 0;
  for (size_t i = 0; i < std::min(g.size(), want.values.size()); ++i)
    worst = std::max(worst, std::abs(g[i] - want.values[i]) / (1 + std::abs(want.values[i])));
  return worst;
}

bool IsData(const std::string& name) {
  return name == "data" || name == "label" || name == "positions";
}

// Every op of the model needs a compute on the test's device.
class GptAgainstPyTorch : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* op : {"Attention", "LayerNorm", "Embedding", "split", "gelu"}) {
      if (!GetOp(op).On(testing::TestDevice().type))
        GTEST_SKIP() << op << " has no compute on " << testing::TestDevice() << " yet";
    }
  }
};

void CheckLossAndGradients(DType dtype, double tolerance) {
  SCOPED_TRACE(std::string(DTypeName(dtype)));
  examples::GptConfig config = Config();
  config.dtype = dtype;
  const Symbol loss = examples::MakeGpt(config).loss;
  // bfloat16 parameters take float32 data (the model casts its logits for the loss itself).
  const DType data_dtype = dtype == DType::kBFloat16 ? DType::kFloat32 : dtype;
  Executor::ArrayMap args, grads;
  std::map<std::string, GradReq> reqs;
  for (const std::string& name : loss.ListArguments()) {
    args[name] = name == "positions" ? Positions(data_dtype)
                                     : ArrayOf(Find(name), IsData(name) ? data_dtype : dtype);
    if (IsData(name)) continue;
    grads[name] = NDArray(args[name].shape(), testing::TestDevice(), dtype);
    reqs[name] = GradReq::kWrite;
  }
  auto exec = Executor::Bind(loss, testing::TestDevice(), args, grads, reqs);
  exec->Forward(/*is_train=*/true);
  exec->Backward();  // of the sum of the per-token losses
  EXPECT_LE(Error(exec->outputs()[0], Find("loss")), tolerance) << "loss";
  int checked = 0;
  for (const Tensor& t : cases::Tensors()) {
    const std::string name = t.name;
    if (name.rfind("grad.", 0) != 0) continue;
    EXPECT_LE(Error(grads.at(name.substr(5)), t), tolerance) << name;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(grads.size())) << "every parameter's gradient is compared";
  EXPECT_EQ(grads.size(), 4u + 12u * cases::kLayers) << "wte is one parameter, read twice";
}

TEST_F(GptAgainstPyTorch, LossAndEveryGradient) {
  const bool gpu = testing::TestDevice().is_gpu();
  for (DType dtype : testing::TestFloatTypes()) {
    CheckLossAndGradients(dtype, dtype == DType::kFloat64 ? 1e-9
                                 : gpu                    ? testing::kGpuTolerance
                                                          : 1e-5);
  }
}

// The model in bfloat16: data and labels float32 (token ids as they come), every parameter,
// activation and gradient bfloat16, the loss float32; within bfloat16's 8 bits of mantissa (on the
// H100, the worst gradient was 5.5e-2 off, relative to 1 + |PyTorch's float64 value|).
// On a GPU only: the CPU's elementwise ops take float32 and float64 (bfloat16 compute on the CPU
// is the mixed-precision work's).
TEST_F(GptAgainstPyTorch, LossAndEveryGradientInBfloat16) {
  if (!testing::TestDevice().is_gpu()) GTEST_SKIP() << "bfloat16 elementwise ops: GPU only";
  CheckLossAndGradients(DType::kBFloat16, 8e-2);
}

// PyTorch's weights by weft's name (every argument of `net` but its inputs), float32.
std::map<std::string, NDArray> Weights(const Symbol& net) {
  std::map<std::string, NDArray> params;
  for (const std::string& name : net.ListArguments()) {
    if (!IsData(name)) params[name] = ArrayOf(Find(name), DType::kFloat32);
  }
  return params;
}

// The generation step with the key-value cache (examples/common/gpt_generate.h), fed the tokens in
// chunks of 3, 1, 2 and 1 positions, gives the logits of the full forward at every position,
// within float32 rounding: each chunk attends over what the earlier ones cached.
TEST_F(GptAgainstPyTorch, CachedStepsGiveTheFullForwardsLogits) {
  const double tolerance = testing::TestDevice().is_gpu() ? testing::kGpuTolerance : 1e-5;
  const Symbol logits = examples::MakeGpt(Config()).logits;
  std::map<std::string, NDArray> args = Weights(logits);
  const Tensor& tokens = Find("data");  // (kBatch, kTime)
  args["data"] = ArrayOf(tokens, DType::kFloat32);
  args["positions"] = Positions(DType::kFloat32);
  auto exec = Executor::Bind(logits, testing::TestDevice(), args);
  exec->Forward(/*is_train=*/false);
  const testing::Values full = testing::ValuesOf(exec->outputs()[0]);  // (kBatch * kTime, vocab)

  examples::GptGenerator generator(Config(), examples::MakeGptStep(Config()), Weights(logits),
                                   testing::TestDevice(), cases::kBatch);
  const int vocab = cases::kVocab, time = cases::kTime;
  int start = 0;
  for (int length : {3, 1, 2, 1}) {
    std::vector<float> chunk;
    for (int b = 0; b < cases::kBatch; ++b) {
      for (int i = 0; i < length; ++i) chunk.push_back(tokens.values[b * time + start + i]);
    }
    const std::vector<float> got = generator.Feed(chunk, start);
    ASSERT_EQ(got.size(), static_cast<size_t>(cases::kBatch) * length * vocab);
    for (int b = 0; b < cases::kBatch; ++b) {
      for (int i = 0; i < length; ++i) {
        for (int v = 0; v < vocab; ++v) {
          const double want = full[(b * time + start + i) * vocab + v];
          EXPECT_NEAR(got[(b * length + i) * vocab + v], want, tolerance * (1 + std::abs(want)))
              << "sequence " << b << ", position " << start + i << ", logit " << v;
        }
      }
    }
    start += length;
  }
  EXPECT_EQ(start, time);
}

// Sampling with a seed gives the same characters every time, past the window's end too (the
// context is 8: 20 characters refill the caches a few times); temperature 0 takes the likeliest.
TEST_F(GptAgainstPyTorch, SamplingWithASeedIsReproducible) {
  const Symbol step = examples::MakeGptStep(Config());
  const std::map<std::string, NDArray> params = Weights(examples::MakeGpt(Config()).logits);
  const auto sample = [&](uint64_t seed, double temperature) {
    examples::GptGenerator generator(Config(), step, params, testing::TestDevice());
    std::mt19937_64 rng(seed);
    return generator.Continue({1, 2, 3}, 20, {.temperature = temperature, .top_k = 5}, rng);
  };
  const std::vector<int> a = sample(7, 1.0);
  ASSERT_EQ(a.size(), 20u);
  for (int id : a) EXPECT_TRUE(id >= 0 && id < cases::kVocab) << id;
  EXPECT_EQ(sample(7, 1.0), a);
  EXPECT_NE(sample(8, 1.0), a) << "another seed, another sample (20 draws among 5)";
  EXPECT_EQ(sample(7, 0.0), sample(8, 0.0));
}

// The trainer as train_gpt builds it, its parameters PyTorch's initial ones.
std::unique_ptr<Trainer> MakeTrainer(const examples::Gpt& gpt) {
  const int64_t tokens = int64_t{cases::kBatch} * cases::kTime;
  AdamW adamw(cases::kLr, cases::kBeta1, cases::kBeta2, cases::kEpsilon, cases::kWd,
              /*rescale_grad=*/1.0 / static_cast<double>(tokens));
  adamw.set_decay_filter(DecayMatricesOnly);
  TrainerOptions options{.device = testing::TestDevice()};
  options.schedule = {.decay = LrSchedule::Cosine{.steps = cases::kSteps - cases::kWarmup},
                      .warmup_steps = cases::kWarmup};
  options.clip_global_norm = cases::kClip;
  options.initialize = [](const std::string& name, const NDArray& array) {
    ArrayOf(Find(name), DType::kFloat32).CopyTo(array);
    return true;
  };
  const Shape bt{cases::kBatch, cases::kTime};
  return std::make_unique<Trainer>(
      gpt.loss,
      std::map<std::string, Shape>{{"data", bt}, {"label", bt}, {"positions", Shape{cases::kTime}}},
      Zero(), adamw, options);
}

// The qkv bias after the steps. Its key part (elements W..2W) has a gradient of exactly 0: adding
// b to every key adds q . b to each of a query's scores, which softmax ignores. What the backward
// computes for it is rounding noise (1e-17 in PyTorch's float64, 1e-9 in weft's float32), and
// Adam divides noise by its own size: each run moves those elements by up to the rate per step,
// in directions noise picks. So the key part is only checked to stay within kSteps * kLr of its
// start; the query and value parts track PyTorch's.
void CheckQkvBias(const testing::Values& got, const std::string& name, double tolerance) {
  const Tensor& want = Find("after." + name);
  const Tensor& start = Find(name);
  ASSERT_EQ(got.size(), 3u * cases::kWidth);
  for (size_t i = 0; i < got.size(); ++i) {
    const bool key = i >= cases::kWidth && i < 2u * cases::kWidth;
    const double expected = key ? start.values[i] : want.values[i];
    const double bound = key ? cases::kSteps * cases::kLr : tolerance * (1 + std::abs(expected));
    EXPECT_NEAR(got[i], expected, bound) << name << " element " << i;
  }
}

TEST_F(GptAgainstPyTorch, TenAdamWStepsTrackPyTorch) {
  const double tolerance = testing::TestDevice().is_gpu() ? 1e-3 : 1e-4;
  const std::unique_ptr<Trainer> trainer = MakeTrainer(examples::MakeGpt(Config()));
  const Tensor& want_losses = Find("step_loss");
  for (int t = 0; t < cases::kSteps; ++t) {
    const std::string step = "step" + std::to_string(t);
    trainer->Step({{"data", ArrayOf(Find(step + ".data"), DType::kFloat32)},
                   {"label", ArrayOf(Find(step + ".label"), DType::kFloat32)},
                   {"positions", Positions(DType::kFloat32)}});
    const testing::Values losses = testing::ValuesOf(trainer->outputs()[0]);
    double mean = 0;
    for (double l : losses) mean += l / static_cast<double>(losses.size());
    EXPECT_NEAR(mean, want_losses.values[t], tolerance * (1 + want_losses.values[t])) << step;
  }
  int checked = 0;
  for (const std::string& name : trainer->parameter_names()) {
    const NDArray got = trainer->parameter(name);
    if (name.find("_attn_qkv_bias") == std::string::npos) {
      EXPECT_LE(Error(got, Find("after." + name)), tolerance) << name;
    } else {
      CheckQkvBias(testing::ValuesOf(got), name, tolerance);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 4 + 12 * cases::kLayers);
}

}  // namespace
}  // namespace weft
