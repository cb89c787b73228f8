// BatchNorm and LayerNorm (ops/nn/batch_norm.cc, ops/nn/layer_norm.cc). BatchNorm: declarative
// cases against a float64 reference in every mode (training, use_global_stats, inference,
// fix_gamma, relu, channel axes and ranks), each with its finite-difference gradient in the
// forward's mode (op_test_util.h); the running statistics after several training steps; PyTorch's
// nn.BatchNorm1d/2d (tests/batch_norm_torch_cases.h); every backward request; bfloat16 data
// against float32; a bound graph; and bad input. LayerNorm: declarative cases over axes, ranks and
// eps; PyTorch's numbers in float32, float64 and bfloat16 (tests/layer_norm_torch_cases.h); larger
// data against the formula; every backward request; its hidden outputs; and bad input. On a GPU
// (gpu_ops_norm_test) the same tests compare the GPU with the CPU and the references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "ops/attrs.h"
#include "passes/cse.h"
#include "passes/infer.h"
#include "storage/ndarray.h"
#include "tests/batch_norm_torch_cases.h"
#include "tests/layer_norm_torch_cases.h"
#include "tests/op_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/imperative.h"

namespace weft::testing {
namespace {

// ---- The reference ----

// A case's attributes and mode.
struct Bn {
  int axis = 1;
  bool train = true;    // OpContext::is_train
  bool global = false;  // use_global_stats
  bool fix_gamma = false;
  bool relu = false;
  double eps = 1e-5;
  double momentum = 0.9;

  bool Batch() const { return train && !global; }
  AttrMap Attrs() const {
    return {{"axis", std::to_string(axis)},
            {"use_global_stats", global ? "true" : "false"},
            {"fix_gamma", fix_gamma ? "true" : "false"},
            {"act_type", relu ? "relu" : "none"},
            {"eps", FloatAttr(eps)},
            {"momentum", FloatAttr(momentum)}};
  }
};

// Data seen as (outer, C, inner) around the channel axis.
struct Dims {
  int64_t outer = 1, c = 1, inner = 1;
  int64_t At(int64_t o, int64_t ch, int64_t i) const { return (o * c + ch) * inner + i; }
  int64_t PerChannel() const { return outer * inner; }
};

Dims DimsOf(const Shape& data, int axis) {
  if (axis < 0) axis += data.ndim();
  Dims d;
  d.c = data[axis];
  for (int a = 0; a < axis; ++a) d.outer *= data[a];
  for (int a = axis + 1; a < data.ndim(); ++a) d.inner *= data[a];
  return d;
}

// Calls f(at) for each index of channel ch.
template <typename F>
void ForChannel(const Dims& d, int64_t ch, F f) {
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t i = 0; i < d.inner; ++i) f(d.At(o, ch, i));
}

// The batch's mean and biased variance per channel.
void BatchMoments(const Dims& d, const Values& x, Values& mean, Values& var) {
  mean.assign(d.c, 0.0), var.assign(d.c, 0.0);
  const double n = static_cast<double>(d.PerChannel());
  for (int64_t ch = 0; ch < d.c; ++ch) {
    ForChannel(d, ch, [&](int64_t at) { mean[ch] += x[at] / n; });
    ForChannel(d, ch, [&](int64_t at) { var[ch] += (x[at] - mean[ch]) * (x[at] - mean[ch]) / n; });
  }
}

// in: (data, gamma, beta, moving_mean, moving_var) -> gamma * x_hat + beta, before relu.
Values PreActivation(const Bn& bn, const Shape& data, const Inputs& in) {
  const Dims d = DimsOf(data, bn.axis);
  Values mean = in[3], var = in[4];
  if (bn.Batch()) BatchMoments(d, in[0], mean, var);
  Values z(in[0].size());
  for (int64_t ch = 0; ch < d.c; ++ch) {
    const double gamma = bn.fix_gamma ? 1.0 : in[1][ch];
    ForChannel(d, ch, [&](int64_t at) {
      z[at] = gamma * (in[0][at] - mean[ch]) / std::sqrt(var[ch] + bn.eps) + in[2][ch];
    });
  }
  return z;
}

Values Reference(const Bn& bn, const Shape& data, const Inputs& in) {
  Values y = PreActivation(bn, data, in);
  if (!bn.relu) return y;
  for (double& v : y) {
    // Finite differences need every input off relu's kink.
    EXPECT_GT(std::abs(v), 1e-3) << "a case's input lies on relu's kink: choose other shapes";
    v = std::max(v, 0.0);
  }
  return y;
}

// gamma in [0.5, 1.5), moving_var in (0.2, 2); the rest uniform in [-1, 1).
void BnInit(int i, Values& v) {
  if (i == 1)
    for (double& x : v) x = 1 + 0.5 * x;
  if (i == 4) Positive(i, v);
}

OpCase BnCase(const Bn& bn, const Shape& data, const std::string& what) {
  const Shape channels{DimsOf(data, bn.axis).c};
  OpCase c{"BatchNorm",
           bn.Attrs(),
           {data, channels, channels, channels, channels},
           [=](const Inputs& in) { return Outputs{Reference(bn, data, in)}; }};
  c.init = BnInit;
  c.is_train = bn.train;
  c.no_gradient_inputs = {3, 4};  // the running statistics
  c.tolerance = 2e-5;
  c.name = "BatchNorm " + what + " data " + data.ToString();
  return c;
}

// ---- Declarative cases ----

TEST(BatchNorm, TrainingNormalizesNchwDataWithTheBatchStatistics) {
  RunOpCase(BnCase({}, Shape{2, 3, 2, 2}, "training"));
}

TEST(BatchNorm, TrainingOnTwoDimensionalDataNormalizesEachFeatureOverTheBatch) {
  RunOpCase(BnCase({}, Shape{5, 4}, "training (N, C)"));
}

TEST(BatchNorm, TheChannelAxisMayBeAnyAxisOfAnyRankFromTwoToFive) {
  RunOpCase(BnCase({.axis = -1}, Shape{2, 3, 4}, "training axis -1"));
  RunOpCase(BnCase({.axis = 0}, Shape{3, 4}, "training axis 0"));
  RunOpCase(BnCase({.axis = 2}, Shape{2, 1, 3, 2, 2}, "training axis 2"));
}

TEST(BatchNorm, UseGlobalStatsNormalizesWithTheMovingStatisticsInTraining) {
  RunOpCase(BnCase({.global = true}, Shape{2, 3, 2, 2}, "use_global_stats"));
}

TEST(BatchNorm, InferenceNormalizesWithTheMovingStatistics) {
  RunOpCase(BnCase({.train = false}, Shape{2, 3, 2, 2}, "inference"));
  RunOpCase(BnCase({.axis = -1, .train = false}, Shape{3, 2, 4}, "inference axis -1"));
}

TEST(BatchNorm, FixGammaScalesByOneAndGivesGammaAZeroGradient) {
  RunOpCase(BnCase({.fix_gamma = true}, Shape{3, 2, 3}, "fix_gamma training"));
  RunOpCase(BnCase({.train = false, .fix_gamma = true}, Shape{3, 2, 3}, "fix_gamma inference"));
}

TEST(BatchNorm, ReluActTypeAppliesReluAfterTheAffineStep) {
  RunOpCase(BnCase({.relu = true}, Shape{2, 3, 2, 2}, "relu training"));
  RunOpCase(BnCase({.global = true, .relu = true}, Shape{4, 3}, "relu use_global_stats"));
}

// ---- Tolerances ----

// Tolerance of float32 and float64 results.
double TolOf(DType t) { return t == DType::kFloat64 ? 1e-12 : 2e-6; }

// ---- Running statistics ----

TEST(BatchNorm, RunningStatisticsMoveTowardsTheBatchWithTheUnbiasedVariance) {
  const Shape data{3, 2, 2, 2};  // 12 values per channel
  const Dims d = DimsOf(data, 1);
  const Bn bn{.momentum = 0.8};
  for (DType t : TestFloatTypes()) {
    Values mean(d.c, 0.0), var(d.c, 1.0);  // PyTorch's initial running statistics
    const NDArray gamma = ArrayOf(Values(d.c, 1.0), Shape{d.c}, t);
    const NDArray beta = ArrayOf(Values(d.c, 0.0), Shape{d.c}, t);
    const NDArray moving_mean = ArrayOf(mean, Shape{d.c}, t),
                  moving_var = ArrayOf(var, Shape{d.c}, t);
    for (uint64_t step = 0; step < 4; ++step) {
      const Values x = Uniform(data.Size(), step, -2, 3);
      Invoke("BatchNorm", {ArrayOf(x, data, t), gamma, beta, moving_mean, moving_var}, bn.Attrs(),
             {.is_train = true});
      Values batch_mean, batch_var;
      BatchMoments(d, x, batch_mean, batch_var);
      for (int64_t ch = 0; ch < d.c; ++ch) {
        mean[ch] = 0.8 * mean[ch] + 0.2 * batch_mean[ch];
        var[ch] = 0.8 * var[ch] + 0.2 * batch_var[ch] * 12 / 11;
      }
      const std::string what = "step " + std::to_string(step) + " " + DTypeName(t).data();
      ExpectNear(ValuesOf(moving_mean), mean, TolOf(t), "moving_mean after " + what);
      ExpectNear(ValuesOf(moving_var), var, TolOf(t), "moving_var after " + what);
    }
  }
}

TEST(BatchNorm, InferenceAndUseGlobalStatsLeaveTheRunningStatisticsAlone) {
  const Shape data{4, 3};
  for (DType t : TestFloatTypes()) {
    const Values mean = Uniform(3, 1), var = Uniform(3, 2, 0.5, 2);
    const NDArray moving_mean = ArrayOf(mean, Shape{3}, t), moving_var = ArrayOf(var, Shape{3}, t);
    const NDArray ones = ArrayOf(Values(3, 1.0), Shape{3}, t);
    for (const Bn bn : {Bn{.train = false}, Bn{.global = true}}) {
      Invoke("BatchNorm", {ArrayOf(Uniform(12, 3), data, t), ones, ones, moving_mean, moving_var},
             bn.Attrs(), {.is_train = bn.train});
      EXPECT_EQ(ValuesOf(moving_mean), mean);
      EXPECT_EQ(ValuesOf(moving_var), var);
    }
  }
}

// ---- PyTorch ----

// One step of a PyTorch case: forward in `bn`'s mode, then the gradients of sum(y * gy).
void CheckTorchStep(const batch_norm_torch::Case& tc, const batch_norm_torch::Step& s, const Bn& bn,
                    DType t, std::vector<NDArray>& in, const std::string& what) {
  const Shape data(std::vector<int64_t>(tc.shape.begin(), tc.shape.end()));
  const Shape channels{data[1]};
  const Op& op = GetOp("BatchNorm");
  const Attrs attrs = ParseAttrs(op, bn.Attrs());
  in[0] = ArrayOf(s.x, data, t);
  const std::vector<NDArray> out = Invoke(op, attrs, in, {.is_train = bn.train});
  const double tol = 1e-5;
  ExpectNear(ValuesOf(out[0]), s.y, tol, what + " output");
  ExpectNear(ValuesOf(in[3]), s.running_mean, tol, what + " running_mean");
  ExpectNear(ValuesOf(in[4]), s.running_var, tol, what + " running_var");
  std::vector<NDArray> grads = {NDArray(data, TestDevice(), t), NDArray(channels, TestDevice(), t),
                                NDArray(channels, TestDevice(), t), NDArray(), NDArray()};
  const NDArray zeros = ArrayOf(Values(channels[0], 0.0), channels, t);
  InvokeBackward(op, attrs, in, out, {ArrayOf(s.gy, data, t), zeros, zeros}, grads,
                 {OpReq::kWrite, OpReq::kWrite, OpReq::kWrite, OpReq::kNull, OpReq::kNull},
                 bn.train);
  ExpectNear(ValuesOf(grads[0]), s.dx, tol, what + " d_data");
  ExpectNear(ValuesOf(grads[1]), s.dweight, tol, what + " d_gamma");
  ExpectNear(ValuesOf(grads[2]), s.dbias, tol, what + " d_beta");
}

TEST(BatchNorm, MatchesPyTorchOverTrainingStepsAndInEvalMode) {
  for (const batch_norm_torch::Case& tc : batch_norm_torch::Cases()) {
    const int64_t c = tc.shape[1];
    // PyTorch's momentum m is weft's 1 - m.
    const Bn train{.eps = tc.eps, .momentum = 1 - tc.momentum};
    Bn eval = train;
    eval.train = false;
    for (DType t : TestFloatTypes()) {
      std::vector<NDArray> in = {
          NDArray(), ArrayOf(tc.weight, Shape{c}, t), ArrayOf(tc.bias, Shape{c}, t),
          ArrayOf(tc.running_mean, Shape{c}, t), ArrayOf(tc.running_var, Shape{c}, t)};
      const std::string what = std::string(tc.name) + " " + DTypeName(t).data();
      for (size_t k = 0; k < tc.train.size(); ++k)
        CheckTorchStep(tc, tc.train[k], train, t, in, what + " training step " + std::to_string(k));
      CheckTorchStep(tc, tc.eval, eval, t, in, what + " eval");
    }
  }
}

// The gradients `got` with requests `req` into arrays that held 0.25, against `want` with kWrite.
void ExpectRequestsHonoured(const std::vector<Values>& got, const std::vector<Values>& want,
                            const std::vector<OpReq>& req, double tol) {
  for (size_t o = 0; o < req.size(); ++o) {
    Values expected(want[o].size(), 0.25);
    for (size_t k = 0; k < expected.size(); ++k) {
      if (req[o] == OpReq::kWrite) expected[k] = want[o][k];
      if (req[o] == OpReq::kAddTo) expected[k] += want[o][k];
    }
    ExpectNear(got[o], expected, tol, "output " + std::to_string(o));
  }
}

// ---- Backward requests ----

// The gradients (d_data, d_gamma, d_beta) of one forward, with `req`, into arrays holding 0.25.
std::vector<Values> BackwardWith(const Bn& bn, const std::vector<NDArray>& in,
                                 const std::vector<NDArray>& out, const NDArray& dy,
                                 const std::vector<OpReq>& req) {
  std::vector<NDArray> grads = {NDArray(in[0].shape(), TestDevice(), in[0].dtype()),
                                NDArray(in[1].shape(), TestDevice(), in[1].dtype()),
                                NDArray(in[2].shape(), TestDevice(), in[2].dtype())};
  for (const NDArray& g : grads) g.Fill(0.25);
  Invoke("_backward_BatchNorm", {dy, in[0], in[1], in[2], out[1], out[2]}, bn.Attrs(),
         {.outputs = grads, .req = req, .is_train = bn.train});
  return {ValuesOf(grads[0]), ValuesOf(grads[1]), ValuesOf(grads[2])};
}

TEST(BatchNorm, BackwardHonoursEachRequestOnItsOwn) {
  const Shape data{3, 2, 2};
  const std::vector<std::vector<OpReq>> requests = {
      {OpReq::kNull, OpReq::kWrite, OpReq::kWrite},
      {OpReq::kWrite, OpReq::kNull, OpReq::kNull},
      {OpReq::kAddTo, OpReq::kNull, OpReq::kAddTo},
      {OpReq::kNull, OpReq::kAddTo, OpReq::kWrite},
  };
  for (DType t : TestFloatTypes()) {
    for (const Bn bn : {Bn{}, Bn{.train = false}, Bn{.fix_gamma = true}}) {
      const std::vector<NDArray> in = {
          ArrayOf(Uniform(12, 4), data, t), ArrayOf(Uniform(2, 5, 0.5, 1.5), Shape{2}, t),
          ArrayOf(Uniform(2, 6), Shape{2}, t), ArrayOf(Uniform(2, 7), Shape{2}, t),
          ArrayOf(Uniform(2, 8, 0.5, 1.5), Shape{2}, t)};
      const std::vector<NDArray> out = Invoke("BatchNorm", in, bn.Attrs(), {.is_train = bn.train});
      const NDArray dy = ArrayOf(Uniform(12, 9), data, t);
      const std::vector<OpReq> write(3, OpReq::kWrite);
      const std::vector<Values> want = BackwardWith(bn, in, out, dy, write);
      for (const std::vector<OpReq>& req : requests) {
        const std::vector<Values> got = BackwardWith(bn, in, out, dy, req);
        ExpectRequestsHonoured(got, want, req, TolOf(t));
      }
    }
  }
}

// ---- bfloat16 ----

// Forward and backward of `bn` with data and out_grad of dtype `t` on `device` (the other inputs
// in the statistics' dtype): the output, the running statistics after, and the three gradients,
// as values.
std::vector<Values> RunBn(const Bn& bn, const Shape& data, const Inputs& in, const Values& dy,
                          DType t, Device device) {
  const Shape c{DimsOf(data, bn.axis).c};
  const DType s = t == DType::kFloat64 ? t : DType::kFloat32;  // the statistics' dtype
  std::vector<NDArray> arrays = {ArrayOf(in[0], data, t, device)};
  for (int i = 1; i < 5; ++i) arrays.push_back(ArrayOf(in[i], c, s, device));
  const Op& op = GetOp("BatchNorm");
  const Attrs attrs = ParseAttrs(op, bn.Attrs());
  const std::vector<NDArray> out = Invoke(op, attrs, arrays, {.is_train = bn.train});
  EXPECT_EQ(out[0].dtype(), t);
  EXPECT_EQ(out[1].dtype(), s);
  std::vector<NDArray> grads = {NDArray(data, device, t), NDArray(c, device, s),
                                NDArray(c, device, s), NDArray(), NDArray()};
  const NDArray zeros = ArrayOf(Values(c[0], 0.0), c, s, device);
  InvokeBackward(op, attrs, arrays, out, {ArrayOf(dy, data, t, device), zeros, zeros}, grads,
                 {OpReq::kWrite, OpReq::kWrite, OpReq::kWrite, OpReq::kNull, OpReq::kNull},
                 bn.train);
  return {ValuesOf(out[0]),   ValuesOf(arrays[3]), ValuesOf(arrays[4]),
          ValuesOf(grads[0]), ValuesOf(grads[1]),  ValuesOf(grads[2])};
}

// bfloat16 data on TestDevice() (statistics in float32) against float32 on the CPU, on the same
// bf16-exact values: the data and its gradient round to bf16 once (2^-9), the rest is float32.
// NCHW images, and channels-last ones (the channels the last axis: on a GPU, cuDNN's NHWC and,
// training, persistent kernels, as a channels-last ResNet runs them).
TEST(BatchNorm, Bfloat16DataKeepsItsStatisticsInFloat32) {
  const char* names[] = {"output", "moving_mean", "moving_var", "d_data", "d_gamma", "d_beta"};
  for (const auto& [axis, data] : {std::pair{1, Shape{4, 3, 2, 2}}, {3, Shape{4, 2, 3, 8}}}) {
    const int64_t n = data.Size(), c = data[axis];
    const Inputs in = {Bf16Exact(Uniform(n, 10, -2, 2)), Uniform(c, 11, 0.5, 1.5), Uniform(c, 12),
                       Uniform(c, 13), Uniform(c, 14, 0.5, 1.5)};
    const Values dy = Bf16Exact(Uniform(n, 15));
    for (Bn bn : {Bn{}, Bn{.train = false}, Bn{.relu = true}, Bn{.global = true}}) {
      bn.axis = axis;
      const std::vector<Values> want = RunBn(bn, data, in, dy, DType::kFloat32, Device::Cpu());
      const std::vector<Values> got = RunBn(bn, data, in, dy, DType::kBFloat16, TestDevice());
      for (int k = 0; k < 6; ++k) {
        const bool rounded = k == 0 || k == 3;
        ExpectNear(got[k], want[k], rounded ? 8e-3 : 1e-4,
                   std::string("bfloat16 ") + data.ToString() + " axis " + std::to_string(axis) +
                       " " + names[k] + (bn.train ? " training" : " inference") +
                       (bn.relu ? " relu" : "") + (bn.global ? " use_global_stats" : ""));
      }
    }
  }
}

// ---- Gradients of every mode, in every dtype ----

// The gradients (d_data, d_gamma, d_beta) of sum(y * dy), by the textbook formula.
Outputs ReferenceGradients(const Bn& bn, const Shape& data, const Inputs& in, const Values& dy) {
  const Dims d = DimsOf(data, bn.axis);
  Values mean = in[3], var = in[4];
  if (bn.Batch()) BatchMoments(d, in[0], mean, var);
  const Values z = PreActivation(bn, data, in);
  const double n = static_cast<double>(d.PerChannel());
  Values dx(in[0].size()), d_gamma(d.c), d_beta(d.c);
  for (int64_t ch = 0; ch < d.c; ++ch) {
    const double invstd = 1 / std::sqrt(var[ch] + bn.eps);
    const double gamma = bn.fix_gamma ? 1.0 : in[1][ch];
    const auto g = [&](int64_t at) { return bn.relu && z[at] <= 0 ? 0.0 : dy[at]; };
    const auto x_hat = [&](int64_t at) { return (in[0][at] - mean[ch]) * invstd; };
    double sum = 0, sum_x_hat = 0;
    ForChannel(d, ch, [&](int64_t at) { sum += g(at), sum_x_hat += g(at) * x_hat(at); });
    d_beta[ch] = sum;
    d_gamma[ch] = bn.fix_gamma ? 0.0 : sum_x_hat;
    ForChannel(d, ch, [&](int64_t at) {
      const double centred = bn.Batch() ? sum / n + x_hat(at) * sum_x_hat / n : 0.0;
      dx[at] = gamma * invstd * (g(at) - centred);
    });
  }
  return {dx, d_gamma, d_beta};
}

// The declarative cases check float64 gradients (the CPU's loops) against finite differences; this
// checks every dtype on TestDevice() (weft's loops on the CPU, cuDNN on a GPU) against the formula.
TEST(BatchNorm, GradientsFollowTheTextbookFormulaInEveryModeAndDtype) {
  const std::vector<std::pair<Bn, Shape>> modes = {
      {Bn{}, Shape{2, 3, 2, 2}},
      {Bn{.axis = -1}, Shape{2, 3, 4}},
      {Bn{.train = false}, Shape{4, 3}},
      {Bn{.global = true}, Shape{2, 3, 2, 2}},
      {Bn{.fix_gamma = true}, Shape{3, 2, 3}},
      {Bn{.train = false, .fix_gamma = true}, Shape{3, 2, 3}},
      {Bn{.relu = true}, Shape{2, 3, 2, 2}},
      {Bn{.train = false, .relu = true}, Shape{2, 3, 2, 2}},
      // Channels-last images (on a GPU: cuDNN's NHWC kernels, persistent ones in training), and
      // one of 3 channels, which cuDNN's persistent kernels may decline.
      {Bn{.axis = 3}, Shape{2, 3, 2, 8}},
      {Bn{.axis = 3, .relu = true}, Shape{2, 2, 3, 16}},
      {Bn{.axis = 3, .fix_gamma = true}, Shape{3, 2, 2, 3}},
  };
  for (const auto& [bn, data] : modes) {
    const int64_t c = DimsOf(data, bn.axis).c;
    const Inputs in = {Uniform(data.Size(), 20, -2, 2), Uniform(c, 21, 0.5, 1.5), Uniform(c, 22),
                       Uniform(c, 23), Uniform(c, 24, 0.5, 1.5)};
    const Values dy = Uniform(data.Size(), 25);
    const Values y = Reference(bn, data, in);
    const Outputs want = ReferenceGradients(bn, data, in, dy);
    for (DType t : TestFloatTypes()) {
      const std::vector<Values> got = RunBn(bn, data, in, dy, t, TestDevice());
      const std::string what = std::string(DTypeName(t)) + " " + data.ToString() +
                               (bn.train ? " training" : " inference") +
                               (bn.global ? " use_global_stats" : "") +
                               (bn.fix_gamma ? " fix_gamma" : "") + (bn.relu ? " relu" : "");
      const double tol = t == DType::kFloat64 ? 1e-10 : 1e-5;
      ExpectNear(got[0], y, tol, what + " output");
      ExpectNear(got[3], want[0], tol, what + " d_data");
      ExpectNear(got[4], want[1], tol, what + " d_gamma");
      ExpectNear(got[5], want[2], tol, what + " d_beta");
    }
  }
}

// ---- Graphs ----

TEST(BatchNorm, ParameterShapesFollowFromTheDataInAGraph) {
  const Symbol bn = Symbol::Op("BatchNorm", {Symbol::Variable("data")}, {{"axis", "-1"}}, "bn");
  const std::map<std::string, Shape> shapes =
      InferArgumentShapes(bn.ToGraph(), {{"data", Shape{4, 5, 3}}});
  for (const char* name : {"bn_gamma", "bn_beta", "bn_moving_mean", "bn_moving_var"}) {
    ASSERT_TRUE(shapes.contains(name)) << name;
    EXPECT_EQ(shapes.at(name), Shape{3}) << name;
  }
  EXPECT_EQ(bn.num_outputs(), 1u);  // the saved statistics are the op's own
}

TEST(BatchNorm, IsNeverMergedWithAnIdenticalBatchNorm) {
  const Symbol x = Symbol::Variable("data");
  const Symbol g = Symbol::Variable("g"), b = Symbol::Variable("b");
  const Symbol m = Symbol::Variable("m"), v = Symbol::Variable("v");
  const Symbol twice = Symbol::Group(
      {Symbol::Op("BatchNorm", {x, g, b, m, v}), Symbol::Op("BatchNorm", {x, g, b, m, v})});
  EXPECT_TRUE(GetOp("BatchNorm").HasEffects());
  const Graph merged = EliminateCommonExpr(twice.ToGraph());
  EXPECT_EQ(std::count_if(merged.nodes().begin(), merged.nodes().end(),
                          [](const Node& n) { return !n.is_variable(); }),
            2);
}

// loss = sum(y^2) with gamma 1 and beta 0: y = x_hat, so d_beta = 2 sum(y) = 0,
// d_gamma = 2 sum(x_hat^2) = 2 n var / (var + eps), and loss = n var / (var + eps) hardly depends
// on the data.
TEST(BatchNorm, ABoundGraphTrainsAndMovesTheRunningStatistics) {
  const Shape data{4, 5, 3};
  const Symbol y = Symbol::Op("BatchNorm", {Symbol::Variable("data")}, {{"axis", "-1"}}, "bn");
  const Symbol loss = Symbol::Op("sum", {Symbol::Op("square", {y})});
  const Values x = Uniform(60, 16, -2, 2);
  Executor::ArrayMap args = {{"data", ArrayOf(x, data, DType::kFloat32)},
                             {"bn_gamma", ArrayOf(Values(3, 1.0), Shape{3}, DType::kFloat32)},
                             {"bn_beta", ArrayOf(Values(3, 0.0), Shape{3}, DType::kFloat32)},
                             {"bn_moving_mean", ArrayOf(Values(3, 0.0), Shape{3}, DType::kFloat32)},
                             {"bn_moving_var", ArrayOf(Values(3, 1.0), Shape{3}, DType::kFloat32)}};
  Executor::ArrayMap grads;
  std::map<std::string, GradReq> reqs;
  for (const char* name : {"data", "bn_gamma", "bn_beta"}) {
    grads[name] = NDArray(args[name].shape(), TestDevice());
    reqs[name] = GradReq::kWrite;
  }
  auto exec = Executor::Bind(loss, TestDevice(), args, grads, reqs);
  exec->Forward(/*is_train=*/true);
  exec->Backward();
  Values mean, var, d_gamma(3);
  BatchMoments(DimsOf(data, -1), x, mean, var);
  for (int ch = 0; ch < 3; ++ch) {
    d_gamma[ch] = 2 * 20 * var[ch] / (var[ch] + 1e-5);
    mean[ch] *= 0.1;
  }
  ExpectNear(ValuesOf(args["bn_moving_mean"]), mean, 1e-6, "moving_mean");
  ExpectNear(ValuesOf(grads["bn_gamma"]), d_gamma, 1e-5, "d_gamma");
  ExpectNear(ValuesOf(grads["bn_beta"]), Values(3, 0.0), 1e-4, "d_beta");
  ExpectNear(ValuesOf(grads["data"]), Values(60, 0.0), 1e-3, "d_data");
}

// ---- Bad input ----

TEST(BatchNorm, BadInputsSayWhatWasExpected) {
  const Shape c{3};
  ExpectOpError("BatchNorm", {{"axis", "4"}}, {Shape{2, 3, 4, 5}, c, c, c, c},
                {"BatchNorm", "axis 4 is out of range", "(2, 3, 4, 5)", "[-4, 3]"});
  ExpectOpError("BatchNorm", {}, {Shape{3}, c, c, c, c},
                {"BatchNorm", "data must have 2 to 5 axes", "found (3,)"});
  ExpectOpError("BatchNorm", {}, {Shape{2, 3, 1, 1, 1, 2}, c, c, c, c},
                {"BatchNorm", "2 to 5 axes", "found (2, 3, 1, 1, 1, 2)"});
  ExpectOpError("BatchNorm", {}, {Shape{2, 3, 4}, Shape{4}, c, c, c},
                {"BatchNorm", "gamma must be (3,)", "along axis 1", "found (4,)"});
  ExpectOpError("BatchNorm", {{"axis", "-1"}}, {Shape{2, 3, 4}, Shape{4}, c, c, c},
                {"BatchNorm", "beta must be (4,)", "along axis -1", "found (3,)"});
  ExpectOpError("BatchNorm", {}, {Shape{2, 3}, c, c, c, Shape{3, 1}},
                {"BatchNorm", "moving_var must be (3,)", "found (3, 1)"});
  ExpectOpError("BatchNorm", {{"eps", "0"}}, {Shape{2, 3}, c, c, c, c},
                {"BatchNorm", "'eps'", "> 0", "found 0"});
  ExpectOpError("BatchNorm", {{"eps", "-1e-5"}}, {Shape{2, 3}, c, c, c, c},
                {"BatchNorm", "'eps'", "found -1e-05"});
  ExpectOpError("BatchNorm", {{"momentum", "1.5"}}, {Shape{2, 3}, c, c, c, c},
                {"BatchNorm", "'momentum'", "[0, 1]", "found 1.5"});
  ExpectOpError("BatchNorm", {{"act_type", "tanh"}}, {Shape{2, 3}, c, c, c, c},
                {"BatchNorm", "act_type", "'relu'", "'tanh'"});
  ExpectOpError("BatchNorm", {}, {Shape{2, 3}, c, c, c},
                {"BatchNorm", "expected 5 input(s), found 4"});
  ExpectOpError("_backward_BatchNorm", {{"act_type", "relu"}},
                {Shape{2, 3}, Shape{2, 3}, c, c, c, c},
                {"_backward_BatchNorm", "expected 7 input(s), found 6"});
}

TEST(BatchNorm, StatisticsAreFloat32ForFloat32AndBfloat16DataAndFloat64ForFloat64) {
  const Op& op = GetOp("BatchNorm");
  const Attrs attrs = ParseAttrs(op, {});
  using D = DType;
  EXPECT_EQ(
      InferTypes(op, attrs, {D::kBFloat16, D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32}),
      (std::vector<D>{D::kBFloat16, D::kFloat32, D::kFloat32}));
  EXPECT_EQ(
      InferTypes(op, attrs, {D::kFloat64, D::kFloat64, D::kFloat64, D::kFloat64, D::kFloat64}),
      (std::vector<D>{D::kFloat64, D::kFloat64, D::kFloat64}));
  const auto message = [&](std::vector<D> in) {
    try {
      InferTypes(op, attrs, in);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(message({D::kBFloat16, D::kBFloat16, D::kFloat32, D::kFloat32, D::kFloat32})
                .find("gamma must be float32 for bfloat16 data"),
            std::string::npos);
  EXPECT_NE(message({D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat64, D::kFloat32})
                .find("moving_mean must be float32 for float32 data"),
            std::string::npos);
  EXPECT_NE(message({D::kInt32, D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32})
                .find("data must be float32, float64, bfloat16 or float16, found int32"),
            std::string::npos);
}

TEST(BatchNorm, TrainingNeedsMoreThanOneValuePerChannel) {
  const auto inputs = [] {  // data (1, 3): one value per channel
    std::vector<NDArray> in = {NDArray(Shape{1, 3}, TestDevice())};
    for (int i = 0; i < 4; ++i) in.push_back(NDArray(Shape{3}, TestDevice()));
    for (const NDArray& a : in) a.Fill(1);
    return in;
  };
  std::string message = "<no error>";
  try {
    Invoke("BatchNorm", inputs(), {}, {.is_train = true})[0].WaitToRead();
  } catch (const Error& e) {
    message = e.what();
  }
  for (const char* part : {"BatchNorm", "more than one value per channel", "(1, 3)"})
    EXPECT_NE(message.find(part), std::string::npos) << message;
  // Outside training one value per channel is fine (new arrays: the failed call's error stays on
  // the running statistics it would have updated).
  EXPECT_NO_THROW(Invoke("BatchNorm", inputs())[0].WaitToRead());
}

// ==== LayerNorm (ops/nn/layer_norm.cc) ====

struct Ln {
  int axis = -1;
  double eps = 1e-5;
  std::string out_dtype;  // empty: the data's
  AttrMap Attrs() const {
    AttrMap a = {{"axis", std::to_string(axis)}, {"eps", FloatAttr(eps)}};
    if (!out_dtype.empty()) a["out_dtype"] = out_dtype;
    return a;
  }
};

// Data seen as (outer, C, inner) around the normalized axis: row r = o * inner + i holds the C
// values d.At(o, j, i).
int64_t RowsOf(const Dims& d) { return d.outer * d.inner; }

// Per row: its mean and rstd = 1 / sqrt(biased variance + eps).
void RowMoments(const Ln& ln, const Dims& d, const Values& x, Values& mean, Values& rstd) {
  mean.assign(RowsOf(d), 0.0), rstd.assign(RowsOf(d), 0.0);
  for (int64_t o = 0; o < d.outer; ++o) {
    for (int64_t i = 0; i < d.inner; ++i) {
      const int64_t r = o * d.inner + i;
      double sum = 0, squares = 0;
      for (int64_t j = 0; j < d.c; ++j) sum += x[d.At(o, j, i)];
      mean[r] = sum / d.c;
      for (int64_t j = 0; j < d.c; ++j) squares += std::pow(x[d.At(o, j, i)] - mean[r], 2);
      rstd[r] = 1 / std::sqrt(squares / d.c + ln.eps);
    }
  }
}

// Calls f(at, j, r) for every value: its index, its position in its row, its row.
template <typename F>
void ForEachValue(const Dims& d, F f) {
  for (int64_t o = 0; o < d.outer; ++o)
    for (int64_t j = 0; j < d.c; ++j)
      for (int64_t i = 0; i < d.inner; ++i) f(d.At(o, j, i), j, o * d.inner + i);
}

// in: (data, gamma, beta) -> (output).
Values LnReference(const Ln& ln, const Shape& data, const Inputs& in) {
  const Dims d = DimsOf(data, ln.axis);
  Values mean, rstd, y(in[0].size());
  RowMoments(ln, d, in[0], mean, rstd);
  ForEachValue(d, [&](int64_t at, int64_t j, int64_t r) {
    y[at] = (in[0][at] - mean[r]) * rstd[r] * in[1][j] + in[2][j];
  });
  return y;
}

// The gradients (d_data, d_gamma, d_beta) of sum(y * dy), by the textbook formula.
Outputs LnReferenceGradients(const Ln& ln, const Shape& data, const Inputs& in, const Values& dy) {
  const Dims d = DimsOf(data, ln.axis);
  Values mean, rstd, dx(in[0].size()), d_gamma(d.c, 0.0), d_beta(d.c, 0.0);
  RowMoments(ln, d, in[0], mean, rstd);
  Values g_mean(RowsOf(d), 0.0), g_x_hat_mean(RowsOf(d), 0.0);  // per row, over C
  const auto x_hat = [&](int64_t at, int64_t r) { return (in[0][at] - mean[r]) * rstd[r]; };
  ForEachValue(d, [&](int64_t at, int64_t j, int64_t r) {
    g_mean[r] += dy[at] * in[1][j] / d.c;
    g_x_hat_mean[r] += dy[at] * in[1][j] * x_hat(at, r) / d.c;
    d_gamma[j] += dy[at] * x_hat(at, r);
    d_beta[j] += dy[at];
  });
  ForEachValue(d, [&](int64_t at, int64_t j, int64_t r) {
    dx[at] = rstd[r] * (dy[at] * in[1][j] - g_mean[r] - x_hat(at, r) * g_x_hat_mean[r]);
  });
  return {dx, d_gamma, d_beta};
}

// gamma in [0.5, 1.5); data and beta uniform in [-1, 1).
void LnInit(int i, Values& v) {
  if (i == 1)
    for (double& x : v) x = 1 + 0.5 * x;
}

OpCase LnCase(const Ln& ln, const Shape& data, const std::string& what) {
  const Shape c{DimsOf(data, ln.axis).c};
  OpCase oc{"LayerNorm", ln.Attrs(), {data, c, c}, [=](const Inputs& in) {
              return Outputs{LnReference(ln, data, in)};
            }};
  oc.init = LnInit;
  oc.tolerance = 2e-5;
  oc.name = "LayerNorm " + what + " data " + data.ToString();
  return oc;
}

TEST(LayerNorm, NormalizesEachRowOverTheLastAxisByDefault) {
  RunOpCase(LnCase({}, Shape{4, 6}, "axis -1"));
  RunOpCase(LnCase({}, Shape{2, 3, 5}, "axis -1"));
  RunOpCase(LnCase({}, Shape{7}, "one axis"));
}

TEST(LayerNorm, NormalizesOverAnAxisThatIsNotTheLast) {
  RunOpCase(LnCase({.axis = 1}, Shape{2, 4, 3}, "axis 1"));
  RunOpCase(LnCase({.axis = 0}, Shape{5, 3}, "axis 0"));
  RunOpCase(LnCase({.axis = -2}, Shape{2, 3, 2, 2}, "axis -2"));
}

TEST(LayerNorm, EpsIsAddedToTheVariance) {
  RunOpCase(LnCase({.eps = 0.25}, Shape{3, 4}, "eps 0.25"));
}

// Forward and backward (every request kWrite) of `ln` with data and out_grad of dtype `t` on
// `device`, gamma and beta in the statistics' dtype: the output, mean, rstd and the three
// gradients, as values.
std::vector<Values> RunLn(const Ln& ln, const Shape& data, const Inputs& in, const Values& dy,
                          DType t, Device device) {
  const Shape c{DimsOf(data, ln.axis).c};
  const DType s = t == DType::kFloat64 ? t : DType::kFloat32;  // the statistics' dtype
  const std::vector<NDArray> arrays = {ArrayOf(in[0], data, t, device),
                                       ArrayOf(in[1], c, s, device), ArrayOf(in[2], c, s, device)};
  const Op& op = GetOp("LayerNorm");
  const Attrs attrs = ParseAttrs(op, ln.Attrs());
  const std::vector<NDArray> out = Invoke(op, attrs, arrays);
  EXPECT_EQ(out[0].dtype(), t);
  EXPECT_EQ(out[1].dtype(), s);
  EXPECT_EQ(out[2].dtype(), s);
  const Shape stat = out[1].shape();
  const NDArray zeros = ArrayOf(Values(stat.Size(), 0.0), stat, s, device);
  std::vector<NDArray> grads = {NDArray(data, device, t), NDArray(c, device, s),
                                NDArray(c, device, s)};
  InvokeBackward(op, attrs, arrays, out, {ArrayOf(dy, data, t, device), zeros, zeros}, grads,
                 {OpReq::kWrite, OpReq::kWrite, OpReq::kWrite}, false);
  return {ValuesOf(out[0]),   ValuesOf(out[1]),   ValuesOf(out[2]),
          ValuesOf(grads[0]), ValuesOf(grads[1]), ValuesOf(grads[2])};
}

const char* const kLnResults[] = {"output", "mean", "rstd", "d_data", "d_gamma", "d_beta"};

// PyTorch's numbers, in float32 and float64 (1e-5) and bfloat16 (the output and d_data rounded
// to bfloat16, 2^-9 relative, and the rest float32 statistics of the same bf16-exact inputs).
TEST(LayerNorm, MatchesPyTorchInEveryDtypeOverShapesAxesAndEps) {
  for (const layer_norm_torch::Case& tc : layer_norm_torch::Cases()) {
    const Shape data(std::vector<int64_t>(tc.shape.begin(), tc.shape.end()));
    const Ln ln{.axis = tc.axis, .eps = tc.eps};
    std::vector<DType> types = TestFloatTypes();
    types.push_back(DType::kBFloat16);
    const Outputs want = {tc.y, tc.mean, tc.rstd, tc.dx, tc.dweight, tc.dbias};
    for (DType t : types) {
      const std::vector<Values> got =
          RunLn(ln, data, {tc.x, tc.weight, tc.bias}, tc.gy, t, TestDevice());
      for (int k = 0; k < 6; ++k) {
        const bool rounded = t == DType::kBFloat16 && (k == 0 || k == 3);
        const double tol = rounded ? 8e-3 : t == DType::kBFloat16 ? 1e-4 : 1e-5;
        ExpectNear(got[k], want[k], tol,
                   std::string(tc.name) + " " + DTypeName(t).data() + " " + kLnResults[k]);
      }
    }
  }
}

// Enough rows and columns that the CPU's loops and oneDNN split them across threads
// (ops_norm_threads_test runs each op on 4), against the formula.
TEST(LayerNorm, LargerDataMatchesTheFormulaInEveryDtype) {
  for (const auto& [ln, data] :
       {std::pair{Ln{}, Shape{64, 300}}, std::pair{Ln{.axis = 1}, Shape{8, 300, 9}}}) {
    const int64_t c = DimsOf(data, ln.axis).c;
    const Inputs in = {Uniform(data.Size(), 30, -2, 2), Uniform(c, 31, 0.5, 1.5), Uniform(c, 32)};
    const Values dy = Uniform(data.Size(), 33);
    const Outputs want = LnReferenceGradients(ln, data, in, dy);
    const Values y = LnReference(ln, data, in);
    for (DType t : TestFloatTypes()) {
      const std::vector<Values> got = RunLn(ln, data, in, dy, t, TestDevice());
      const std::string what = std::string(DTypeName(t)) + " " + data.ToString();
      const double tol = t == DType::kFloat64 ? 1e-10 : 2e-5;
      ExpectNear(got[0], y, tol, what + " output");
      for (int k = 0; k < 3; ++k)
        ExpectNear(got[3 + k], want[k], tol, what + " " + kLnResults[3 + k]);
    }
  }
}

// A transformer's widths, whose rows the GPU holds a warp each (768 in 6 packs of float32 or 3 of
// bfloat16, 1024 in 8 or 4; kernels/layer_norm.cuh), beside 1028, one past the warp kernels'
// longest row; enough rows that the backward's parameter gradients add partial sums of several
// blocks. float32 against the formula; bfloat16 (bf16-exact data) against float32 on the CPU.
TEST(LayerNorm, TransformerWidthsMatchTheFormulaInFloat32AndBfloat16) {
  for (const Shape& data : {Shape{300, 768}, Shape{3, 70, 1024}, Shape{37, 1028}}) {
    const Ln ln{};
    const int64_t c = DimsOf(data, ln.axis).c;
    const Inputs in = {Bf16Exact(Uniform(data.Size(), 40, -2, 2)), Uniform(c, 41, 0.5, 1.5),
                       Uniform(c, 42)};
    const Values dy = Bf16Exact(Uniform(data.Size(), 43));
    const Outputs grads = LnReferenceGradients(ln, data, in, dy);
    const Outputs formula = {LnReference(ln, data, in), grads[0], grads[1], grads[2]};
    const std::vector<Values> cpu = RunLn(ln, data, in, dy, DType::kFloat32, Device::Cpu());
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      const std::vector<Values> got = RunLn(ln, data, in, dy, t, TestDevice());
      const std::string what = std::string(DTypeName(t)) + " " + data.ToString();
      for (int k : {0, 3, 4, 5}) {
        const bool rounded = t == DType::kBFloat16 && (k == 0 || k == 3);
        if (t == DType::kFloat32) {
          ExpectNear(got[k], formula[k == 0 ? 0 : k - 2], 5e-5, what + " " + kLnResults[k]);
        } else {
          ExpectNear(got[k], cpu[k], rounded ? 8e-3 : 1e-4, what + " " + kLnResults[k]);
        }
      }
    }
  }
}

// The gradients of one forward with `req`, into arrays holding 0.25.
std::vector<Values> LnBackwardWith(const Ln& ln, const std::vector<NDArray>& in,
                                   const std::vector<NDArray>& out, const NDArray& dy,
                                   const std::vector<OpReq>& req) {
  std::vector<NDArray> grads;
  for (const NDArray& a : in) grads.push_back(NDArray(a.shape(), TestDevice(), a.dtype()));
  for (const NDArray& g : grads) g.Fill(0.25);
  Invoke("_backward_LayerNorm", {dy, in[0], in[1], out[1], out[2]}, ln.Attrs(),
         {.outputs = grads, .req = req});
  return {ValuesOf(grads[0]), ValuesOf(grads[1]), ValuesOf(grads[2])};
}

TEST(LayerNorm, BackwardHonoursEachRequestOnItsOwn) {
  const std::vector<std::vector<OpReq>> requests = {{OpReq::kNull, OpReq::kWrite, OpReq::kWrite},
                                                    {OpReq::kWrite, OpReq::kNull, OpReq::kNull},
                                                    {OpReq::kAddTo, OpReq::kNull, OpReq::kAddTo},
                                                    {OpReq::kNull, OpReq::kAddTo, OpReq::kWrite},
                                                    {OpReq::kAddTo, OpReq::kAddTo, OpReq::kAddTo}};
  for (DType t : TestFloatTypes()) {
    for (const auto& [ln, data] :
         {std::pair{Ln{}, Shape{3, 4}}, std::pair{Ln{.axis = 0}, Shape{4, 3}}}) {
      const int64_t c = DimsOf(data, ln.axis).c;
      const std::vector<NDArray> in = {ArrayOf(Uniform(12, 4), data, t),
                                       ArrayOf(Uniform(c, 5, 0.5, 1.5), Shape{c}, t),
                                       ArrayOf(Uniform(c, 6), Shape{c}, t)};
      const std::vector<NDArray> out = Invoke("LayerNorm", in, ln.Attrs());
      const NDArray dy = ArrayOf(Uniform(12, 9), data, t);
      const std::vector<Values> want = LnBackwardWith(ln, in, out, dy, {3, OpReq::kWrite});
      for (const std::vector<OpReq>& req : requests) {
        const std::vector<Values> got = LnBackwardWith(ln, in, out, dy, req);
        ExpectRequestsHonoured(got, want, req, TolOf(t));
      }
    }
  }
}

// The forward's output added to (arrays holding 0.25), in every data dtype of the device (float32,
// bfloat16, and float64 on the CPU or float16 on the GPU): the written output plus 0.25.
TEST(LayerNorm, ForwardAddsToItsOutputInEveryDtype) {
  const Shape data{6, 8}, c{8};
  const DType wide = TestDevice().is_gpu() ? DType::kFloat16 : DType::kFloat64;
  for (DType t : {DType::kFloat32, wide, DType::kBFloat16}) {
    const DType stat = t == DType::kFloat64 ? t : DType::kFloat32;
    const std::vector<NDArray> in = {ArrayOf(Uniform(48, 70), data, t),
                                     ArrayOf(Uniform(8, 71, 0.5, 1.5), c, stat),
                                     ArrayOf(Uniform(8, 72), c, stat)};
    const std::vector<NDArray> written = Invoke("LayerNorm", in, Ln{}.Attrs());
    const std::vector<NDArray> added = {ArrayOf(Values(48, 0.25), data, t),
                                        NDArray(written[1].shape(), TestDevice(), stat),
                                        NDArray(written[2].shape(), TestDevice(), stat)};
    Invoke("LayerNorm", in, Ln{}.Attrs(),
           {.outputs = added, .req = {OpReq::kAddTo, OpReq::kWrite, OpReq::kWrite}});
    Values want = ValuesOf(written[0]);
    for (double& v : want) v += 0.25;
    const double tolerance = t == DType::kBFloat16 ? 2e-2 : t == DType::kFloat16 ? 4e-3 : 1e-6;
    ExpectNear(ValuesOf(added[0]), want, tolerance, std::string(DTypeName(t)));
  }
}

NDArray CastTo(const NDArray& a, DType t) {
  return Invoke("Cast", {a}, {{"dtype", std::string(DTypeName(t))}}).at(0);
}

// out_dtype: float32 data normalized in float32, the output rounded once into bfloat16 (and
// float16 on a GPU): the float32 op's output cast, bit for bit, on each path (rows of 768: the
// GPU's warp kernels; of 1028 and over axis 0: its block kernels); added to, the sum taken in
// float32 and rounded once. The backward takes its out_grad in that dtype and gives, bit for bit,
// the float32 op's gradients of that out_grad widened.
TEST(LayerNorm, OutDtypeRoundsTheFloat32OutputOnceAndTakesItsGradientIn16Bits) {
  std::vector<DType> lows = {DType::kBFloat16};
  if (TestDevice().is_gpu()) lows.push_back(DType::kFloat16);
  for (DType low : lows) {
    for (const auto& [ln, data] :
         {std::pair{Ln{}, Shape{300, 768}}, std::pair{Ln{}, Shape{37, 1028}},
          std::pair{Ln{.axis = 0}, Shape{6, 5}}}) {
      const int64_t c = DimsOf(data, ln.axis).c, n = data.Size();
      const std::vector<NDArray> in = {ArrayOf(Uniform(n, 50, -2, 2), data, DType::kFloat32),
                                       ArrayOf(Uniform(c, 51, 0.5, 1.5), Shape{c}, DType::kFloat32),
                                       ArrayOf(Uniform(c, 52), Shape{c}, DType::kFloat32)};
      Ln narrow = ln;
      narrow.out_dtype = DTypeName(low);
      const std::string what = narrow.out_dtype + " " + data.ToString();
      const std::vector<NDArray> wide = Invoke("LayerNorm", in, ln.Attrs());
      const std::vector<NDArray> got = Invoke("LayerNorm", in, narrow.Attrs());
      ASSERT_EQ(got[0].dtype(), low);
      EXPECT_EQ(ValuesOf(got[0]), ValuesOf(CastTo(wide[0], low))) << what;
      for (int k : {1, 2}) EXPECT_EQ(ValuesOf(got[k]), ValuesOf(wide[k])) << what;

      const NDArray before = ArrayOf(Uniform(n, 53), data, low), y = CastTo(before, low);
      const std::vector<NDArray> stats = {NDArray(got[1].shape(), TestDevice(), DType::kFloat32),
                                          NDArray(got[2].shape(), TestDevice(), DType::kFloat32)};
      Invoke("LayerNorm", in, narrow.Attrs(),
             {.outputs = {y, stats[0], stats[1]},
              .req = {OpReq::kAddTo, OpReq::kWrite, OpReq::kWrite}});
      const NDArray sum = Invoke("add", {CastTo(before, DType::kFloat32), wide[0]}).at(0);
      EXPECT_EQ(ValuesOf(y), ValuesOf(CastTo(sum, low))) << what << " added to";

      const NDArray dy = ArrayOf(Uniform(n, 54), data, low);
      const std::vector<OpReq> write(3, OpReq::kWrite);
      EXPECT_EQ(LnBackwardWith(narrow, in, got, dy, write),
                LnBackwardWith(ln, in, wide, CastTo(dy, DType::kFloat32), write))
          << what << " backward";
    }
  }
}

TEST(LayerNorm, KeepsOnlyAMeanAndAnRstdPerRowForTheBackward) {
  const Op& op = GetOp("LayerNorm");
  EXPECT_EQ(InferShapes(op, ParseAttrs(op, {}), {Shape{2, 3, 8}, Shape{8}, Shape{8}}),
            (std::vector<Shape>{Shape{2, 3, 8}, Shape{2, 3, 1}, Shape{2, 3, 1}}));
  EXPECT_EQ(InferShapes(op, ParseAttrs(op, {{"axis", "1"}}), {Shape{2, 3, 8}, Shape{3}, Shape{3}}),
            (std::vector<Shape>{Shape{2, 3, 8}, Shape{2, 1, 8}, Shape{2, 1, 8}}));
  using D = DType;
  EXPECT_EQ(InferTypes(op, ParseAttrs(op, {}), {D::kBFloat16, D::kFloat32, D::kFloat32}),
            (std::vector<D>{D::kBFloat16, D::kFloat32, D::kFloat32}));
  EXPECT_EQ(InferTypes(op, ParseAttrs(op, {}), {D::kFloat64, D::kFloat64, D::kFloat64}),
            (std::vector<D>{D::kFloat64, D::kFloat64, D::kFloat64}));
}

TEST(LayerNorm, ParameterShapesFollowFromTheDataInAGraph) {
  const Symbol ln = Symbol::Op("LayerNorm", {Symbol::Variable("data")}, {{"axis", "1"}}, "ln");
  const std::map<std::string, Shape> shapes =
      InferArgumentShapes(ln.ToGraph(), {{"data", Shape{4, 5, 3}}});
  for (const char* name : {"ln_gamma", "ln_beta"}) {
    ASSERT_TRUE(shapes.contains(name)) << name;
    EXPECT_EQ(shapes.at(name), Shape{5}) << name;
  }
  EXPECT_EQ(ln.num_outputs(), 1u);  // mean and rstd are the op's own
}

// A bfloat16 network keeps LayerNorm's affine terms float32 through a Cast of each parameter
// (examples::MakeGpt does): the parameters' shapes still follow from the data, back through the
// Cast (and a unary pointwise op), and a parameter nothing can size is still named.
TEST(LayerNorm, ParameterShapesFollowFromTheDataThroughACast) {
  const Symbol gamma = Symbol::Op("Cast", {Symbol::Variable("g")}, {{"dtype", "float32"}});
  const Symbol beta =
      Symbol::Op("relu", {Symbol::Op("Cast", {Symbol::Variable("b")}, {{"dtype", "float32"}})});
  const Symbol ln = Symbol::Op("LayerNorm", {Symbol::Variable("data"), gamma, beta}, {}, "ln");
  const std::map<std::string, Shape> shapes =
      InferArgumentShapes(ln.ToGraph(), {{"data", Shape{4, 6}}});
  EXPECT_EQ(shapes.at("g"), Shape{6});
  EXPECT_EQ(shapes.at("b"), Shape{6});

  const Symbol unsized = Symbol::Op(
      "LayerNorm", {Symbol::Op("Cast", {Symbol::Variable("unsized")}, {{"dtype", "float32"}})});
  ExpectErrorContains([&] { InferArgumentShapes(unsized.ToGraph(), {}); },
                      {"has no shape", "unsized"});
}

// loss = sum(y^2): the gradients are the formula's for out_grad 2y, through a bound graph whose
// backward reads the forward's hidden mean and rstd.
TEST(LayerNorm, ABoundGraphGivesTheFormulasGradients) {
  const Shape data{6, 5};
  const Ln ln{.axis = 0};
  const Symbol y = Symbol::Op("LayerNorm", {Symbol::Variable("data")}, ln.Attrs(), "ln");
  const Symbol loss = Symbol::Op("sum", {Symbol::Op("square", {y})});
  const Inputs in = {Uniform(30, 40, -2, 2), Uniform(6, 41, 0.5, 1.5), Uniform(6, 42)};
  Executor::ArrayMap args = {{"data", ArrayOf(in[0], data, DType::kFloat32)},
                             {"ln_gamma", ArrayOf(in[1], Shape{6}, DType::kFloat32)},
                             {"ln_beta", ArrayOf(in[2], Shape{6}, DType::kFloat32)}};
  Executor::ArrayMap grads;
  std::map<std::string, GradReq> reqs;
  for (const auto& [name, array] : args) {
    grads[name] = NDArray(array.shape(), TestDevice());
    reqs[name] = GradReq::kWrite;
  }
  auto exec = Executor::Bind(loss, TestDevice(), args, grads, reqs);
  exec->Forward(/*is_train=*/true);
  exec->Backward();
  Values dy = LnReference(ln, data, in);
  for (double& v : dy) v *= 2;
  const Outputs want = LnReferenceGradients(ln, data, in, dy);
  ExpectNear(ValuesOf(grads["data"]), want[0], 2e-5, "d_data");
  ExpectNear(ValuesOf(grads["ln_gamma"]), want[1], 2e-5, "d_gamma");
  ExpectNear(ValuesOf(grads["ln_beta"]), want[2], 2e-5, "d_beta");
}

TEST(LayerNorm, BadInputsSayWhatWasExpected) {
  const Shape c{4};
  ExpectOpError("LayerNorm", {}, {Shape{2, 3, 4}, Shape{3}, c},
                {"LayerNorm", "gamma must be (4,)", "data (2, 3, 4) along axis -1", "found (3,)"});
  ExpectOpError("LayerNorm", {{"axis", "1"}}, {Shape{2, 3, 4}, Shape{3}, c},
                {"LayerNorm", "beta must be (3,)", "along axis 1", "found (4,)"});
  ExpectOpError("LayerNorm", {{"axis", "3"}}, {Shape{2, 3, 4}, c, c},
                {"LayerNorm", "axis 3 is out of range", "(2, 3, 4)", "[-3, 2]"});
  ExpectOpError("LayerNorm", {{"axis", "-4"}}, {Shape{2, 3, 4}, c, c},
                {"LayerNorm", "axis -4 is out of range", "[-3, 2]"});
  ExpectOpError("LayerNorm", {}, {Shape{0, 4}, c, c},
                {"LayerNorm", "no empty axis", "found (0, 4)"});
  ExpectOpError("LayerNorm", {{"eps", "0"}}, {Shape{2, 4}, c, c},
                {"LayerNorm", "'eps'", "> 0", "found 0"});
  ExpectOpError("LayerNorm", {}, {Shape{2, 4}, c}, {"LayerNorm", "expected 3 input(s), found 2"});
  ExpectOpError("_backward_LayerNorm", {}, {Shape{2, 4}, Shape{2, 4}, c, Shape{2}, Shape{2, 1}},
                {"_backward_LayerNorm", "mean must be (2, 1)", "found (2,)"});
  const Op& op = GetOp("LayerNorm");
  const std::string message = ErrorMessage([&] {
    InferTypes(op, ParseAttrs(op, {}), {DType::kBFloat16, DType::kBFloat16, DType::kFloat32});
  });
  EXPECT_NE(message.find("gamma must be float32 for bfloat16 data"), std::string::npos) << message;
  using D = DType;
  const auto types_error = [&](const char* name, const AttrMap& attrs, std::vector<D> in) {
    return ErrorMessage([&] { InferTypes(GetOp(name), ParseAttrs(GetOp(name), attrs), in); });
  };
  EXPECT_NE(
      types_error("LayerNorm", {{"out_dtype", "bfloat16"}}, {D::kFloat64, D::kFloat64, D::kFloat64})
          .find("out_dtype bfloat16 expected data of float32 (or of that dtype), found data "
                "of float64"),
      std::string::npos);
  EXPECT_NE(types_error("_backward_LayerNorm", {{"out_dtype", "bfloat16"}},
                        {D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32, D::kFloat32})
                .find("out_grad must be bfloat16, the output's dtype, found float32"),
            std::string::npos);
  EXPECT_NE(ErrorMessage([] {
              ParseAttrs(GetOp("LayerNorm"), {{"out_dtype", "int32"}});
            }).find("one of 'float32' 'float64' 'bfloat16' 'float16'"),
            std::string::npos);
}

}  // namespace
}  // namespace weft::testing
