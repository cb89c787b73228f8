// A training step captured into CUDA graphs (executor/internal/step_capture.h) computes exactly
// what the same step pushed op by op computes: 50 trainer steps with dropout give bitwise the same
// parameters with WEFT_CUDA_GRAPH on and off (so a replay advances the random numbers as the pushes
// do); an executor reshaped between steps records again and stays right; an op that waits on the
// host inside a recording makes that part run without a graph, with one warning, and the results
// do not change. An inference executor's forwards replay graphs too.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "engine/gpu/gpu_stream.h"
#include "ops/op.h"
#include "weft/weft.h"

namespace weft {
namespace {

constexpr int64_t kFeatures = 12, kClasses = 5;
const Device kGpu = Device::Gpu(0);

// An identity whose GPU compute waits on the host (as an op reading a value back would), which a
// CUDA graph cannot record, and which declares no capture barrier: recording it fails.
void HostWait(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
              std::span<const OpReq>, std::span<const TensorView> out) {
  ctx.run.stream->Copy(out[0].raw(), in[0].raw(), in[0].bytes());
  ctx.run.stream->Synchronize();
}
WEFT_REGISTER_OP(_test_host_wait)
    .Describe("identity that synchronizes its stream (test only)")
    .Inputs({"data"})
    .InferShape([](const Attrs&, const std::vector<Shape>& in) {
      return std::vector<Shape>{in[0]};
    });
WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, {{"_test_host_wait", {.compute = HostWait}}});

// Logits of an MLP 12-32-32-5 with dropout after each hidden layer (p = 0: none); `host_wait`
// puts _test_host_wait before the first layer.
Symbol Logits(double p, bool host_wait) {
  Symbol x = Symbol::Variable("data");
  if (host_wait) x = Symbol::Op("_test_host_wait", {x}, {}, "wait");
  for (const char* name : {"fc1", "fc2"}) {
    x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {x}, {{"num_hidden", "32"}}, name)});
    if (p > 0) x = Symbol::Op("Dropout", {x}, {{"p", std::to_string(p)}});
  }
  return Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(kClasses)}}, "fc3");
}

Symbol Loss(double p, bool host_wait = false) {
  return Symbol::Op("SoftmaxCrossEntropy", {Logits(p, host_wait), Symbol::Variable("label")}, {},
                    "loss");
}

// The k-th batch of n rows, on the CPU: values that depend on k only.
std::map<std::string, NDArray> Batch(int k, int64_t n) {
  std::vector<float> x(n * kFeatures), y(n);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.31f * static_cast<float>(i) + 0.7f * static_cast<float>(k));
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>((i * 3 + k) % kClasses);
  return {{"data", NDArray::FromVector(x, Shape{n, kFeatures})},
          {"label", NDArray::FromVector(y, Shape{n})}};
}

// Sets WEFT_CUDA_GRAPH for the executors bound while it lives.
class CudaGraphSwitch {
 public:
  explicit CudaGraphSwitch(const char* value) { setenv("WEFT_CUDA_GRAPH", value, 1); }
  ~CudaGraphSwitch() { unsetenv("WEFT_CUDA_GRAPH"); }
};

struct Trained {
  std::map<std::string, std::vector<float>> params;
  ExecutorStats stats;
};

// The same MLP in bfloat16 (the data cast in, the logits cast out to the loss's float32).
Symbol Bfloat16Loss() {
  Symbol x = Symbol::Op("Cast", {Symbol::Variable("data")}, {{"dtype", "bfloat16"}});
  for (const char* name : {"fc1", "fc2"}) {
    x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {x}, {{"num_hidden", "32"}}, name)});
  }
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(kClasses)}}, "fc3");
  x = Symbol::Op("Cast", {x}, {{"dtype", "float32"}});
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

Trained Train(const Symbol& loss, bool capture, int steps, DType dtype = DType::kFloat32) {
  CudaGraphSwitch on(capture ? "1" : "0");
  SeedRandom(1234);
  Trainer trainer(loss, {{"data", Shape{16, kFeatures}}, {"label", Shape{16}}}, Xavier(),
                  SGD(/*lr=*/0.05, /*momentum=*/0.9, /*wd=*/1e-4, /*rescale_grad=*/1.0 / 16),
                  {.device = kGpu, .dtype = dtype});
  for (int k = 0; k < steps; ++k) trainer.Step(Batch(k, 16));
  Trained out;
  for (const std::string& name : trainer.parameter_names()) {
    const NDArray& p = trainer.parameter(name);
    out.params[name] =
        (p.dtype() == DType::kFloat32 ? p : Invoke("Cast", {p}, {{"dtype", "float32"}})[0])
            .ToVector<float>();
  }
  out.stats = trainer.stats();
  return out;
}

TEST(CapturedStep, FiftyStepsWithDropoutEqualTheStepsPushedOpByOp) {
  const Trained captured = Train(Loss(/*p=*/0.25), /*capture=*/true, 50);
  const Trained pushed = Train(Loss(0.25), /*capture=*/false, 50);
  EXPECT_EQ(captured.stats.cuda_graphs, captured.stats.capture_groups);  // every group replays
  EXPECT_EQ(captured.stats.capture_groups, 2u);  // before and after the loss
  EXPECT_EQ(captured.stats.capture_barriers,
            2u);  // SoftmaxCrossEntropy checks its labels on the device
  EXPECT_EQ(captured.stats.engine_ops_pushed, 4u);
  EXPECT_EQ(pushed.stats.cuda_graphs, 0u);
  for (const auto& [name, values] : pushed.params) {
    EXPECT_EQ(captured.params.at(name), values) << name;  // bit for bit
  }
}

TEST(CapturedStep, ABfloat16TrainerStepEqualsItsPushesToo) {
  const Trained captured = Train(Bfloat16Loss(), /*capture=*/true, 20, DType::kBFloat16);
  const Trained pushed = Train(Bfloat16Loss(), /*capture=*/false, 20, DType::kBFloat16);
  EXPECT_EQ(captured.stats.cuda_graphs, 2u);
  const Trained first = Train(Bfloat16Loss(), /*capture=*/false, 1, DType::kBFloat16);
  for (const auto& [name, values] : pushed.params) {
    EXPECT_EQ(captured.params.at(name), values) << name;
    EXPECT_NE(first.params.at(name), values) << name << " did not train";
  }
}

// The same executor's gradients with and without capture, over steps that change the data, with
// a reshape to another batch size in the middle.
TEST(CapturedStep, AReshapedExecutorRecordsAgainAndStaysRight) {
  std::vector<std::vector<float>> grads[2];
  for (int capture = 0; capture < 2; ++capture) {
    CudaGraphSwitch on(capture ? "1" : "0");
    std::map<std::string, NDArray> args, arg_grads;
    std::map<std::string, GradReq> reqs;
    const Symbol loss = Loss(/*p=*/0);
    const auto shapes =
        InferArgumentShapes(loss.ToGraph(), {{"data", Shape{8, kFeatures}}, {"label", Shape{8}}});
    SeedRandom(5);
    for (const auto& [name, shape] : shapes) {
      args[name] = NDArray(shape, kGpu);
      args[name].FillUniform(-0.5, 0.5);
      if (name == "data" || name == "label") continue;
      arg_grads[name] = NDArray(shape, kGpu);
      reqs[name] = GradReq::kWrite;
    }
    std::unique_ptr<Executor> exec = Executor::Bind(loss, kGpu, args, arg_grads, reqs);
    for (int k = 0; k < 10; ++k) {
      if (k == 5) exec = exec->Reshape({{"data", Shape{24, kFeatures}}, {"label", Shape{24}}});
      const int64_t n = k < 5 ? 8 : 24;
      for (const auto& [name, a] : Batch(k, n)) a.CopyTo(exec->args().at(name));
      exec->TrainStep();
      for (const auto& [name, g] : exec->arg_grads()) grads[capture].push_back(g.ToVector<float>());
    }
    EXPECT_EQ(exec->stats().cuda_graphs, capture ? 2u : 0u);
  }
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t i = 0; i < grads[0].size(); ++i)
    EXPECT_EQ(grads[1][i], grads[0][i]) << "gradient " << i;
}

// An inference executor's forwards replay CUDA graphs after the first two (GraphRun), and give
// bitwise what the same forwards pushed op by op give, over batches of new data written into the
// bound data array. The BatchNorm folded into the convolution leaves stable nodes (the scaled
// weight and the shifted bias) which run outside the graphs, only when their arguments change:
// a new gamma written between forwards reaches the replayed outputs.
TEST(CapturedInference, ForwardsReplayGraphsAndEqualTheForwardsPushedOpByOp) {
  Symbol x = Symbol::Op("Convolution", {Symbol::Variable("data")},
                        {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "8"}}, "conv");
  x = Symbol::Op("relu", {Symbol::Op("BatchNorm", {x}, {}, "bn")});
  x = Symbol::Op("Pooling", {x},
                 {{"kernel", "(2, 2)"}, {"stride", "(2, 2)"}, {"pool_type", "max"}});
  x = Symbol::Op("FullyConnected", {Symbol::Op("flatten", {x})}, {{"num_hidden", "5"}}, "fc");
  const auto shapes = InferArgumentShapes(x.ToGraph(), {{"data", Shape{4, 3, 8, 8}}});
  std::vector<std::vector<float>> outputs[2];
  for (int capture = 0; capture < 2; ++capture) {
    CudaGraphSwitch on(capture ? "1" : "0");
    SeedRandom(11);
    std::map<std::string, NDArray> args;
    for (const auto& [name, shape] : shapes) {
      args[name] = NDArray(shape, kGpu);
      args[name].FillUniform(name == "bn_moving_var" ? 0.5 : -0.5, 1.5);
    }
    std::unique_ptr<Executor> exec = Executor::Bind(x, kGpu, args);
    for (int k = 0; k < 8; ++k) {
      args.at("data").FillUniform(-1, 1);
      if (k == 5) args.at("bn_gamma").FillUniform(2, 3);  // the folded weight changes
      exec->Forward(/*is_train=*/false);
      outputs[capture].push_back(exec->outputs()[0].ToVector<float>());
    }
    EXPECT_EQ(exec->stats().inference_cuda_graphs, capture ? 1u : 0u);
    // The last forward: the graph alone (the folded weights unchanged since k = 5).
    if (capture) EXPECT_EQ(exec->stats().engine_ops_pushed, 1u);
  }
  for (size_t k = 0; k < outputs[0].size(); ++k) {
    EXPECT_EQ(outputs[1][k], outputs[0][k]) << "forward " << k;
    if (k > 0) EXPECT_NE(outputs[1][k], outputs[1][k - 1]) << "forward " << k;
  }
}

// What cuDNN's RNN backward does with its own streams, found by recording it: a recording fails
// (cudaErrorStreamCaptureUnjoined) if work forked from the recorded stream is not joined back,
// so an RNN step that records, and replays to the same gradients as the step pushed op by op,
// shows that this cuDNN joins its streams into the caller's (ops/gpu/rnn.cc skips its own join
// while recording). Bidirectional LSTM with the parameters' gradient requested and not (MXNet's
// case: no backward weights after backward data), and a unidirectional GRU.
TEST(CapturedStep, RnnStepsRecordBecauseCudnnJoinsItsStreams) {
  struct Case {
    const char* mode;
    int layers;
    bool bidirectional;
    GradReq params;
  };
  for (const Case& c :
       {Case{"lstm", 2, true, GradReq::kWrite}, Case{"lstm", 2, true, GradReq::kNull},
        Case{"gru", 1, false, GradReq::kWrite}}) {
    const std::string name =
        std::string(c.mode) + (c.params == GradReq::kNull ? " params null" : "");
    std::vector<Symbol> in = {Symbol::Variable("data"), Symbol::Variable("parameters"),
                              Symbol::Variable("state")};
    if (std::string(c.mode) == "lstm") in.push_back(Symbol::Variable("state_cell"));
    const Symbol rnn = Symbol::Op("RNN", in,
                                  {{"mode", c.mode},
                                   {"state_size", "32"},
                                   {"num_layers", std::to_string(c.layers)},
                                   {"bidirectional", c.bidirectional ? "true" : "false"}});
    const int64_t dirs = c.bidirectional ? 2 : 1;
    std::vector<std::vector<float>> grads[2];
    size_t graphs[2] = {0, 0};
    for (int capture = 0; capture < 2; ++capture) {
      CudaGraphSwitch on(capture ? "1" : "0");
      SeedRandom(11);
      const auto shapes = InferArgumentShapes(
          rnn.ToGraph(), {{"data", Shape{8, 4, 16}}, {"state", Shape{c.layers * dirs, 4, 32}}});
      std::map<std::string, NDArray> args, arg_grads;
      std::map<std::string, GradReq> reqs;
      for (const auto& [arg, shape] : shapes) {
        args[arg] = NDArray(shape, kGpu);
        args[arg].FillUniform(-0.3, 0.3);
        arg_grads[arg] = NDArray(shape, kGpu);
        reqs[arg] = arg == "parameters" ? c.params
                    : arg == "data"     ? GradReq::kWrite
                                        : GradReq::kNull;
      }
      auto exec = Executor::Bind(rnn, kGpu, args, arg_grads, reqs);
      for (int k = 0; k < 6; ++k) {
        exec->args().at("data").FillUniform(-0.3, 0.3);
        exec->TrainStep();
        grads[capture].push_back(arg_grads.at("data").ToVector<float>());
        if (c.params != GradReq::kNull)
          grads[capture].push_back(arg_grads.at("parameters").ToVector<float>());
      }
      graphs[capture] = exec->stats().cuda_graphs;
    }
    EXPECT_EQ(graphs[1], 1u) << name << ": the step did not record";
    EXPECT_EQ(graphs[0], 0u) << name;
    ASSERT_EQ(grads[0].size(), grads[1].size());
    for (size_t i = 0; i < grads[0].size(); ++i)
      EXPECT_EQ(grads[1][i], grads[0][i]) << name << ": gradient " << i;
  }
}

// (Named "CudaError": the sanitizer pass of run_tests.sh leaves out tests that fail CUDA calls.)
TEST(CapturedStep, ARecordingThatFailsOnACudaErrorRunsWithoutAGraphAfterOneWarning) {
  testing::internal::CaptureStderr();
  const Trained captured = Train(Loss(/*p=*/0.1, /*host_wait=*/true), /*capture=*/true, 8);
  const std::string warnings = testing::internal::GetCapturedStderr();
  const Trained pushed = Train(Loss(0.1, true), /*capture=*/false, 8);
  const std::string warning =
      "a training step's segments from '_test_host_wait' run without a CUDA graph";
  EXPECT_NE(warnings.find(warning), std::string::npos) << warnings;
  EXPECT_NE(warnings.find("cudaErrorStreamCaptureUnsupported"), std::string::npos) << warnings;
  EXPECT_EQ(warnings.find("run without a CUDA graph"), warnings.rfind("run without a CUDA graph"))
      << "one warning: " << warnings;
  EXPECT_EQ(captured.stats.cuda_graphs,
            captured.stats.capture_groups - 1);  // the group with the wait
  for (const auto& [name, values] : pushed.params)
    EXPECT_EQ(captured.params.at(name), values) << name;
}

}  // namespace
}  // namespace weft
