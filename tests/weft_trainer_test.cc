// The trainer: its step equals the executor loop with imperative optimizer calls bit for bit on the
// CPU (SGD with momentum, Adam); training saved, loaded into a new trainer and continued equals
// training straight; each step runs with its schedule's rate; clipping by global norm equals the
// same clipping written with imperative ops; the updates are nodes of the bound step; Predict and
// Evaluate run the inference graph on the trained parameters; bad input is a clear weft::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <string>
#include <vector>

#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::ExpectErrorContains;

constexpr int64_t kBatch = 8, kFeatures = 6, kClasses = 4;

// logits (N, 4) from data (N, 6): fc1 (16) - relu - fc2 (12) - relu - fc3 (4).
Symbol Logits() {
  Symbol x = Symbol::Variable("data");
  x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {x}, {{"num_hidden", "16"}}, "fc1")});
  x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {x}, {{"num_hidden", "12"}}, "fc2")});
  return Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(kClasses)}}, "fc3");
}

Symbol Loss() {
  return Symbol::Op("SoftmaxCrossEntropy", {Logits(), Symbol::Variable("label")}, {}, "loss");
}

const std::map<std::string, Shape> kDataShapes = {{"data", Shape{kBatch, kFeatures}},
                                                  {"label", Shape{kBatch}}};

// The k-th batch: data and labels that depend on k only.
std::map<std::string, NDArray> Batch(int k) {
  std::vector<float> x(kBatch * kFeatures), y(kBatch);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(k));
  for (int64_t i = 0; i < kBatch; ++i) y[i] = static_cast<float>((i + k) % kClasses);
  return {{"data", NDArray::FromVector(x, Shape{kBatch, kFeatures})},
          {"label", NDArray::FromVector(y, Shape{kBatch})}};
}

std::map<std::string, std::vector<float>> Values(const std::map<std::string, NDArray>& arrays) {
  std::map<std::string, std::vector<float>> values;
  for (const auto& [name, array] : arrays) values[name] = array.ToVector<float>();
  return values;
}

std::map<std::string, NDArray> Parameters(const Trainer& t) {
  std::map<std::string, NDArray> params;
  for (const std::string& name : t.parameter_names()) params[name] = t.parameter(name);
  return params;
}

std::map<std::string, NDArray> States(const Trainer& t) {
  std::map<std::string, NDArray> states;
  for (const std::string& name : t.state_names()) states[name] = t.state(name);
  return states;
}

// Today's loop: the loss bound by an executor with the trainer's initial parameters, then per
// step Forward, Backward and one imperative update per parameter. `clip` > 0 clips the gradients
// by their global norm with imperative ops first, as trainer.h defines it.
struct ExecutorLoop {
  Executor::ArrayMap args, grads;
  std::vector<std::string> params;
  std::unique_ptr<Executor> exec;

  explicit ExecutorLoop(const Trainer& trainer) {
    std::map<std::string, GradReq> reqs;
    for (const auto& [name, shape] : kDataShapes) args[name] = NDArray(shape);
    for (const std::string& name : trainer.parameter_names()) {
      const NDArray& w = trainer.parameter(name);
      args[name] = NDArray(w.shape());
      w.CopyTo(args[name]);
      grads[name] = NDArray(w.shape());
      reqs[name] = GradReq::kWrite;
      params.push_back(name);
    }
    exec = Executor::Bind(Loss(), Device::Cpu(), args, grads, reqs);
  }
  void Step(int k, Optimizer& opt, double clip = 0, double rescale = 1) {
    for (const auto& [name, array] : Batch(k)) array.CopyTo(args.at(name));
    exec->Forward(/*is_train=*/true);
    exec->Backward();
    std::vector<NDArray> g;
    for (const std::string& p : params) g.push_back(grads.at(p));
    if (clip > 0) g = Clipped(g, clip, rescale);
    for (size_t i = 0; i < params.size(); ++i)
      opt.Update(static_cast<int>(i), args.at(params[i]), g[i]);
  }
  static std::vector<NDArray> Clipped(const std::vector<NDArray>& g, double clip, double rescale) {
    const auto scalar_op = [](const char* name, const NDArray& x, double value) {
      return op::Call(name, {x}, {{"scalar", FloatAttr(value)}})[0];
    };
    const NDArray each =
        op::Call("multi_sum_sq", g, {{"num_args", std::to_string(g.size())}})[0];  // sum(g_i^2)
    const NDArray norm = scalar_op("mul_scalar", op::sqrt(op::Call("sum", {each})[0]), rescale);
    const NDArray scale = scalar_op(
        "minimum_scalar", scalar_op("rdiv_scalar", scalar_op("add_scalar", norm, 1e-6), clip), 1);
    std::vector<NDArray> out;
    for (const NDArray& x : g) out.push_back(op::mul(x, scale));
    return out;
  }
  std::map<std::string, NDArray> Params() const {
    std::map<std::string, NDArray> out;
    for (const std::string& p : params) out[p] = args.at(p);
    return out;
  }
};

// ---- The step against today's loop -----------------------------------------------------------

void ExpectStepsEqualTheLoop(const Optimizer& optimizer, Optimizer& imperative) {
  SeedRandom(3);
  Trainer trainer(Loss(), kDataShapes, Xavier(), optimizer);
  ExecutorLoop loop(trainer);
  const auto initial = Values(Parameters(trainer));
  for (int k = 0; k < 10; ++k) {
    trainer.Step(Batch(k));
    loop.Step(k, imperative);
    ASSERT_EQ(trainer.outputs()[0].ToVector<float>(), loop.exec->outputs()[0].ToVector<float>())
        << "step " << k;
  }
  EXPECT_EQ(Values(Parameters(trainer)), Values(loop.Params()));
  EXPECT_NE(Values(Parameters(trainer)), initial) << "the steps changed nothing";
  EXPECT_EQ(trainer.steps(), 10);
}

TEST(Trainer, SgdStepEqualsTheExecutorLoopBitForBit) {
  SGD sgd(0.05, 0.9, 1e-3, 1.0 / kBatch, 0.8);
  ExpectStepsEqualTheLoop(sgd, sgd);
}

TEST(Trainer, PlainSgdStepEqualsTheExecutorLoopBitForBit) {
  SGD sgd(0.1, 0, 0, 1.0 / kBatch);
  ExpectStepsEqualTheLoop(sgd, sgd);
}

TEST(Trainer, AdamStepEqualsTheExecutorLoopBitForBit) {
  Adam adam(0.01, 0.8, 0.95, 1e-7, 1e-4, 1.0 / kBatch);
  ExpectStepsEqualTheLoop(adam, adam);
}

// AdamW's two rates (lr input of two elements) and the decay filter (biases take wd 0).
TEST(Trainer, AdamWStepWithADecayFilterEqualsTheExecutorLoopBitForBit) {
  AdamW adamw(0.01, 0.9, 0.95, 1e-8, 0.1, 1.0 / kBatch);
  adamw.set_decay_filter(DecayMatricesOnly);
  ExpectStepsEqualTheLoop(adamw, adamw);
  AdamW every(0.01, 0.9, 0.95, 1e-8, 0.1, 1.0 / kBatch);
  SeedRandom(3);
  Trainer filtered(Loss(), kDataShapes, Xavier(), adamw),
      unfiltered(Loss(), kDataShapes, Xavier(), every);
  filtered.Step(Batch(0)), unfiltered.Step(Batch(0));
  EXPECT_NE(Values(Parameters(filtered)), Values(Parameters(unfiltered)));
}

// ---- Tied parameters ----------------------------------------------------------------------------

constexpr int64_t kVocab = 7, kWidth = 5;

// Tokens (N,) -> Embedding with `in` (V, D) -> tanh -> FullyConnected with `out` (V, D), no bias ->
// cross entropy against the next tokens: GPT's tied token embedding and output projection when
// `in` and `out` are one variable (two variables of one name are an error: graph/symbol.h).
Symbol TiedLoss(const Symbol& in, const Symbol& out) {
  const Symbol tokens = Symbol::Variable("tokens");
  Symbol x =
      Symbol::Op("Embedding", {tokens, in},
                 {{"input_dim", std::to_string(kVocab)}, {"output_dim", std::to_string(kWidth)}});
  x = Symbol::Op("FullyConnected", {Symbol::Op("tanh", {x}), out},
                 {{"num_hidden", std::to_string(kVocab)}, {"no_bias", "true"}});
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("next")}, {}, "loss");
}

std::map<std::string, NDArray> TokenBatch() {
  std::vector<float> tokens(kBatch), next(kBatch);
  for (int64_t i = 0; i < kBatch; ++i) tokens[i] = i % kVocab, next[i] = (3 * i + 1) % kVocab;
  return {{"tokens", NDArray::FromVector(tokens, Shape{kBatch})},
          {"next", NDArray::FromVector(next, Shape{kBatch})}};
}

// One variable read by two nodes: its gradient is the sum of the two uses' (the same graph with
// two equal variables), the trainer has one parameter and updates it once per step, and a saved
// file holds one tensor.
TEST(Trainer, ATiedParameterGetsTheSumOfItsGradientsAndOneUpdate) {
  const std::map<std::string, Shape> shapes = {{"tokens", Shape{kBatch}}, {"next", Shape{kBatch}}};
  SeedRandom(4);
  const Symbol wte = Symbol::Variable("wte_weight");
  Trainer trainer(TiedLoss(wte, wte), shapes, Xavier(), SGD(0.5));
  EXPECT_EQ(trainer.parameter_names(), std::vector<std::string>{"wte_weight"});
  const NDArray w0 = trainer.parameter("wte_weight").Copy(Device::Cpu());

  Executor::ArrayMap args = TokenBatch(), grads;
  std::map<std::string, GradReq> reqs;
  for (const char* name : {"a_weight", "b_weight"}) {
    args[name] = w0.Copy(Device::Cpu());
    grads[name] = NDArray(w0.shape());
    reqs[name] = GradReq::kWrite;
  }
  auto untied = Executor::Bind(TiedLoss(Symbol::Variable("a_weight"), Symbol::Variable("b_weight")),
                               Device::Cpu(), args, grads, reqs);
  untied->Forward(/*is_train=*/true);
  untied->Backward();
  const NDArray sum = op::add(grads.at("a_weight"), grads.at("b_weight"));
  const NDArray want =
      op::Call("sub", {w0, op::Call("mul_scalar", {sum}, {{"scalar", "0.5"}})[0]})[0];

  trainer.Step(TokenBatch());
  const std::vector<float> got = trainer.parameter("wte_weight").ToVector<float>(),
                           w = want.ToVector<float>();
  ASSERT_EQ(got.size(), w.size());
  for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], w[k], 1e-6) << "element " << k;
  EXPECT_NE(got, w0.ToVector<float>());

  const std::string path = testing::TempPath("tied.safetensors");
  trainer.Save(path);
  const auto saved = Load(path);
  EXPECT_EQ(saved.count("wte_weight"), 1u);
  EXPECT_EQ(saved.at("wte_weight").ToVector<float>(), got);
}

// ---- Save, Load, resume ----------------------------------------------------------------------

std::map<std::string, NDArray> Auxiliaries(const Trainer& t) {
  std::map<std::string, NDArray> aux;
  for (const std::string& name : t.auxiliary_names()) aux[name] = t.auxiliary(name);
  return aux;
}

void ExpectResumeEqualsTrainingStraight(const Optimizer& optimizer, const TrainerOptions& options,
                                        const Symbol& loss = Loss()) {
  SeedRandom(5);
  Trainer straight(loss, kDataShapes, Xavier(), optimizer, options);
  SeedRandom(5);
  Trainer first(loss, kDataShapes, Xavier(), optimizer, options);
  SeedRandom(6);  // other initial values, which Load must replace
  Trainer resumed(loss, kDataShapes, Xavier(), optimizer, options);
  for (int k = 0; k < 20; ++k) straight.Step(Batch(k));
  for (int k = 0; k < 10; ++k) first.Step(Batch(k));
  const std::string path = testing::TempPath("resume.safetensors");
  first.Save(path);
  resumed.Load(path);
  EXPECT_EQ(resumed.steps(), 10);
  EXPECT_EQ(Values(Parameters(resumed)), Values(Parameters(first)));
  for (int k = 10; k < 20; ++k) resumed.Step(Batch(k));
  EXPECT_EQ(Values(Parameters(resumed)), Values(Parameters(straight)));
  EXPECT_EQ(Values(States(resumed)), Values(States(straight)));
  EXPECT_EQ(Values(Auxiliaries(resumed)), Values(Auxiliaries(straight)));
  EXPECT_EQ(resumed.outputs()[0].ToVector<float>(), straight.outputs()[0].ToVector<float>());
  EXPECT_EQ(resumed.steps(), 20);
}

// fc1 - BatchNorm with relu - fc2 - BatchNorm - relu - fc3: two BatchNorms whose running
// statistics are the trainer's auxiliary states.
Symbol NormLoss() {
  Symbol x = Symbol::Variable("data");
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "16"}}, "fc1");
  x = Symbol::Op("BatchNorm", {x}, {{"act_type", "relu"}}, "bn1");
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "12"}}, "fc2");
  x = Symbol::Op("relu", {Symbol::Op("BatchNorm", {x}, {}, "bn2")});
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(kClasses)}}, "fc3");
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

TEST(Trainer, TenStepsSavedLoadedAndTenMoreEqualTwentyStraightWithBatchNorm) {
  ExpectResumeEqualsTrainingStraight(SGD(0.1, 0.9, 1e-4, 1.0 / kBatch), {}, NormLoss());
}

TEST(Trainer, RunningStatisticsAreAuxiliaryStatesThatPredictReads) {
  Trainer trainer(NormLoss(), kDataShapes, Xavier(), SGD(0.1, 0.9, 0, 1.0 / kBatch));
  const std::vector<std::string> aux = {"bn1_moving_mean", "bn1_moving_var", "bn2_moving_mean",
                                        "bn2_moving_var"};
  EXPECT_EQ(trainer.auxiliary_names(), aux);
  for (const std::string& name : aux) {
    EXPECT_EQ(std::count(trainer.parameter_names().begin(), trainer.parameter_names().end(), name),
              0)
        << name << " is not trained";
    const float initial = name.find("var") != std::string::npos ? 1.0f : 0.0f;
    EXPECT_EQ(trainer.auxiliary(name).ToVector<float>(),
              std::vector<float>(trainer.auxiliary(name).size(), initial))
        << name;
  }
  for (const std::string& s : trainer.state_names())
    EXPECT_EQ(s.find("moving"), std::string::npos) << s << ": no optimizer state for statistics";
  for (int k = 0; k < 3; ++k) trainer.Step(Batch(k));
  EXPECT_NE(trainer.auxiliary("bn1_moving_mean").ToVector<float>(), std::vector<float>(16, 0.0f))
      << "a training step moves the running mean";
  // Predict normalizes with the running statistics: the inference graph bound by hand on the
  // trainer's arrays, run outside training, gives the same.
  const std::map<std::string, NDArray> batch = Batch(7);
  const std::vector<float> predicted = trainer.Predict(batch)[0].ToVector<float>();
  Executor::ArrayMap args = batch;
  for (const std::string& p : trainer.parameter_names()) args[p] = trainer.parameter(p);
  for (const std::string& a : aux) args[a] = trainer.auxiliary(a);
  const std::vector<float> before = trainer.auxiliary("bn2_moving_var").ToVector<float>();
  auto exec = Executor::Bind(NormLoss(), Device::Cpu(), args);
  exec->Forward(/*is_train=*/false);
  EXPECT_EQ(predicted, exec->outputs()[0].ToVector<float>());
  EXPECT_EQ(trainer.auxiliary("bn2_moving_var").ToVector<float>(), before)
      << "inference leaves the statistics alone";
}

TEST(Trainer, TenStepsSavedLoadedAndTenMoreEqualTwentyStraightWithSgd) {
  TrainerOptions options;
  options.schedule = {.decay = LrSchedule::StepDecay{.step_size = 4, .factor = 0.5},
                      .warmup_steps = 3};
  ExpectResumeEqualsTrainingStraight(SGD(0.1, 0.9, 1e-4, 1.0 / kBatch), options);
}

TEST(Trainer, TenStepsSavedLoadedAndTenMoreEqualTwentyStraightWithAdamWAndASchedule) {
  TrainerOptions options;
  options.schedule =
      LrSchedule{.decay = LrSchedule::Cosine{.steps = 15, .final_lr = 1e-3}, .warmup_steps = 5};
  ExpectResumeEqualsTrainingStraight(AdamW(0.01, 0.9, 0.95, 1e-8, 0.1, 1.0 / kBatch), options);
}

TEST(Trainer, TenStepsSavedLoadedAndTenMoreEqualTwentyStraightWithAdamAndClipping) {
  TrainerOptions options;
  options.schedule = {.decay = LrSchedule::Cosine{.steps = 15, .final_lr = 1e-4},
                      .warmup_steps = 2};
  options.clip_global_norm = 0.5;
  ExpectResumeEqualsTrainingStraight(Adam(0.01, 0.9, 0.999, 1e-8, 0, 1.0 / kBatch), options);
}

// ---- Schedules -------------------------------------------------------------------------------

TEST(LrSchedule, RatesFollowTheirFormulas) {
  const double base = 0.2;
  const LrSchedule constant;
  const LrSchedule step{.decay = LrSchedule::StepDecay{.step_size = 3, .factor = 0.5}};
  const LrSchedule cosine{.decay = LrSchedule::Cosine{.steps = 10, .final_lr = 0.01}};
  const LrSchedule warm_cosine{
      .decay = LrSchedule::Cosine{.steps = 10}, .warmup_steps = 4, .warmup_begin = 0.02};
  const LrSchedule warm_step{.decay = LrSchedule::StepDecay{.step_size = 2, .factor = 0.1},
                             .warmup_steps = 5};
  for (int64_t t = 1; t <= 30; ++t) {
    EXPECT_DOUBLE_EQ(constant.Rate(base, t), base);
    EXPECT_DOUBLE_EQ(step.Rate(base, t), base * std::pow(0.5, static_cast<double>((t - 1) / 3)))
        << t;
    const double c = std::min<double>(static_cast<double>(t), 10) / 10;
    EXPECT_DOUBLE_EQ(cosine.Rate(base, t),
                     0.01 + (base - 0.01) * (1 + std::cos(std::numbers::pi * c)) / 2)
        << t;
    const double u = std::min<double>(static_cast<double>(t - 4), 10) / 10;
    const double warm = t <= 4 ? 0.02 + (base - 0.02) * static_cast<double>(t) / 4
                               : base * (1 + std::cos(std::numbers::pi * u)) / 2;
    EXPECT_DOUBLE_EQ(warm_cosine.Rate(base, t), warm) << t;
    const double warm2 =
        t <= 5 ? base * static_cast<double>(t) / 5 : base * std::pow(0.1, (t - 6) / 2);
    EXPECT_DOUBLE_EQ(warm_step.Rate(base, t), warm2) << t;
  }
  // Landmarks: the step decay's first drop, the cosine's middle and end, the warm-up's last step.
  EXPECT_DOUBLE_EQ(step.Rate(base, 3), base);
  EXPECT_DOUBLE_EQ(step.Rate(base, 4), base / 2);
  EXPECT_NEAR(cosine.Rate(base, 5), (base + 0.01) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(cosine.Rate(base, 10), 0.01);
  EXPECT_DOUBLE_EQ(cosine.Rate(base, 50), 0.01);
  EXPECT_DOUBLE_EQ(warm_cosine.Rate(base, 4), base);
}

// Plain SGD without decay, rescaling or clipping: w_t = w_{t-1} - lr_t * grad_t, so each step's
// change of a weight, read with its gradient, tells the rate the step ran with.
TEST(Trainer, EachStepRunsWithItsSchedulesRate) {
  TrainerOptions options;
  options.schedule = {.decay = LrSchedule::StepDecay{.step_size = 2, .factor = 0.5},
                      .warmup_steps = 3};
  SeedRandom(1);
  Trainer trainer(Loss(), kDataShapes, Xavier(), SGD(0.4), options);
  for (int k = 0; k < 8; ++k) {
    const int64_t t = k + 1;
    const double rate = options.schedule.Rate(0.4, t);
    EXPECT_DOUBLE_EQ(trainer.learning_rate(), rate);
    EXPECT_DOUBLE_EQ(trainer.learning_rate(t), rate);
    const std::vector<float> before = trainer.parameter("fc3_weight").ToVector<float>();
    trainer.Step(Batch(k));
    const std::vector<float> after = trainer.parameter("fc3_weight").ToVector<float>();
    const std::vector<float> grad = trainer.gradient("fc3_weight").ToVector<float>();
    int moved = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_FLOAT_EQ(after[i], before[i] - static_cast<float>(rate) * grad[i])
          << "step " << t << ", element " << i;
      moved += after[i] != before[i];
    }
    EXPECT_GT(moved, 0) << "step " << t;
  }
}

// ---- Clipping --------------------------------------------------------------------------------

TEST(Trainer, ClippingByGlobalNormEqualsTheSameClippingWithImperativeOps) {
  const double clip = 0.05, rescale = 1.0 / kBatch;
  SGD sgd(0.1, 0.9, 0, rescale);
  SeedRandom(9);
  Trainer clipped(Loss(), kDataShapes, Xavier(), sgd, {.clip_global_norm = clip});
  SeedRandom(9);
  Trainer unclipped(Loss(), kDataShapes, Xavier(), sgd);
  ExecutorLoop loop(clipped);
  for (int k = 0; k < 5; ++k) {
    clipped.Step(Batch(k));
    unclipped.Step(Batch(k));
    loop.Step(k, sgd, clip, rescale);
    // The gradient arrays keep the unclipped values; their norm is over the clip, so it acts.
    double sum = 0;
    for (const std::string& p : clipped.parameter_names()) {
      for (float g : clipped.gradient(p).ToVector<float>()) sum += double{g} * g;
    }
    EXPECT_GT(rescale * std::sqrt(sum), 2 * clip) << "step " << k;
  }
  EXPECT_EQ(Values(Parameters(clipped)), Values(loop.Params()));
  EXPECT_NE(Values(Parameters(clipped)), Values(Parameters(unclipped)));
}

TEST(Trainer, AClipAboveTheNormChangesNothing) {
  SGD sgd(0.1, 0.9, 0, 1.0 / kBatch);
  SeedRandom(9);
  Trainer clipped(Loss(), kDataShapes, Xavier(), sgd, {.clip_global_norm = 1e6});
  SeedRandom(9);
  Trainer unclipped(Loss(), kDataShapes, Xavier(), sgd);
  for (int k = 0; k < 3; ++k) clipped.Step(Batch(k)), unclipped.Step(Batch(k));
  EXPECT_EQ(Values(Parameters(clipped)), Values(Parameters(unclipped)));
}

// ---- One bound graph ---------------------------------------------------------------------------

TEST(Trainer, TheUpdatesAreNodesOfTheBoundStep) {
  Trainer trainer(Loss(), kDataShapes, Xavier(), SGD(0.1, 0.9));
  ExecutorLoop loop(trainer);
  const ExecutorStats t = trainer.stats(), e = loop.exec->stats();
  EXPECT_EQ(t.forward_nodes, e.forward_nodes);
  EXPECT_EQ(t.backward_nodes, e.backward_nodes + trainer.parameter_names().size());
  EXPECT_EQ(trainer.state_names(),
            (std::vector<std::string>{"fc1_bias.mom", "fc1_weight.mom", "fc2_bias.mom",
                                      "fc2_weight.mom", "fc3_bias.mom", "fc3_weight.mom"}));
  // Bulk execution sees the updates with the backward nodes: with segments as long as the graph,
  // a step is two engine ops: the forward, and the backward with the updates.
  testing::ScopedEnv bulk("WEFT_EXEC_BULK_SIZE", "1000");
  Trainer one_segment(Loss(), kDataShapes, Xavier(), SGD(0.1, 0.9));
  one_segment.Step(Batch(0));
  EXPECT_EQ(one_segment.stats().engine_ops_pushed, 2u);
  for (const std::string& s : one_segment.state_names()) {
    const std::vector<float> mom = one_segment.state(s).ToVector<float>();
    EXPECT_NE(mom, std::vector<float>(mom.size(), 0.0f)) << s << " was not updated";
  }
}

TEST(Trainer, ToDotDrawsTheBoundStepWithItsUpdates) {
  Trainer trainer(Loss(), kDataShapes, Xavier(), SGD(0.1, 0.9));
  const std::string dot = trainer.ToDot();
  EXPECT_EQ(dot.rfind("digraph", 0), 0u) << dot.substr(0, 80);
  for (const std::string& name : trainer.parameter_names()) {
    EXPECT_NE(dot.find(name), std::string::npos) << name << " is not drawn";
  }
  EXPECT_NE(dot.find("sgd_mom_update"), std::string::npos);
  EXPECT_EQ(trainer.ToDot("gradient").find("sgd_mom_update"), std::string::npos)
      << "the graph after the gradient pass has no updates yet";
}

// ---- Predict and Evaluate ----------------------------------------------------------------------

TEST(Trainer, PredictAndEvaluateRunTheInferenceGraphOnTheTrainedParameters) {
  const Symbol probs = Symbol::Op("softmax", {Logits()});
  SeedRandom(2);
  Trainer trainer(Loss(), kDataShapes, Xavier(), SGD(0.5, 0.9, 0, 1.0 / kBatch),
                  {.predict = probs});
  // 20 samples: batches of 8, the last one padded.
  std::vector<float> x, y;
  for (int k = 0; k < 3; ++k) {
    const auto b = Batch(k);
    for (float v : b.at("data").ToVector<float>()) x.push_back(v);
    for (float v : b.at("label").ToVector<float>()) y.push_back(v);
  }
  x.resize(20 * kFeatures), y.resize(20);
  const NDArray data = NDArray::FromVector(x, Shape{20, kFeatures}),
                label = NDArray::FromVector(y, Shape{20});
  const std::vector<float> untrained = trainer.Predict({{"data", data}})[0].ToVector<float>();
  for (int k = 0; k < 10; ++k) trainer.Step(Batch(k % 4));
  // Against the inference symbol bound by hand on copies of the parameters.
  Executor::ArrayMap args = {{"data", data}};
  for (const std::string& p : trainer.parameter_names()) {
    args[p] = NDArray(trainer.parameter(p).shape());
    trainer.parameter(p).CopyTo(args[p]);
  }
  auto exec = Executor::Bind(probs, Device::Cpu(), args);
  exec->Forward(/*is_train=*/false);
  const std::vector<NDArray> out = trainer.Predict({{"data", data}});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].ToVector<float>(), exec->outputs()[0].ToVector<float>());
  EXPECT_NE(out[0].ToVector<float>(), untrained) << "Predict did not read the trained parameters";
  Accuracy whole, batched;
  whole.Update(label, out[0]);
  ArrayIter iter({data, label}, {.batch_size = 8});
  EXPECT_DOUBLE_EQ(trainer.Evaluate(iter, batched), whole.Get());
  EXPECT_EQ(batched.num_samples(), 20) << "the padding of the last batch was counted";
}

// ---- Bad input ---------------------------------------------------------------------------------

TEST(Trainer, BadSettingsAreClearErrors) {
  const auto make = [](const std::map<std::string, Shape>& shapes, const TrainerOptions& options) {
    Trainer trainer(Loss(), shapes, Xavier(), SGD(0.1), options);
  };
  ExpectErrorContains(
      [&] {
        make({{"dta", Shape{kBatch, kFeatures}}, {"label", Shape{kBatch}}}, {});
      },
      {"data input 'dta' is not an argument of the loss", "did you mean 'data'?"});
  ExpectErrorContains([&] { make({{"label", Shape{kBatch}}}, {}); }, {"has no shape", "data"});
  const auto schedule = [&](const LrSchedule& s) { make(kDataShapes, {.schedule = s}); };
  ExpectErrorContains([&] { schedule({.decay = LrSchedule::StepDecay{.step_size = 0}}); },
                      {"expected step_size >= 1, found 0"});
  ExpectErrorContains(
      [&] { schedule({.decay = LrSchedule::StepDecay{.step_size = 2, .factor = 1.5}}); },
      {"step factor in (0, 1], found 1.5"});
  ExpectErrorContains([&] { schedule({.decay = LrSchedule::Cosine{.steps = 0}}); },
                      {"expected cosine steps >= 1, found 0"});
  ExpectErrorContains([&] { schedule({.decay = LrSchedule::Cosine{.steps = 5, .final_lr = NAN}}); },
                      {"final_lr >= 0", "nan"});
  ExpectErrorContains([&] { schedule({.warmup_steps = -1}); },
                      {"expected warmup_steps >= 0, found -1"});
  ExpectErrorContains([&] { schedule({.warmup_steps = 2, .warmup_begin = -0.5}); },
                      {"warmup_begin >= 0", "-0.5"});
  ExpectErrorContains([&] { make(kDataShapes, {.clip_global_norm = -1}); },
                      {"expected clip_global_norm >= 0", "found -1"});
  {
    testing::ScopedEnv graphs("WEFT_CUDA_GRAPH", "sometimes");  // read at Bind, on every device
    ExpectErrorContains([&] { make(kDataShapes, {}); },
                        {"WEFT_CUDA_GRAPH", "expected 1/0", "sometimes"});
  }
  // A layer whose weight is named like fc1_weight's momentum, and one like the learning rate.
  for (const char* own : {"fc1_weight.mom", "trainer.lr"}) {
    const Symbol x = Symbol::Variable("data");
    const Symbol fc1 = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "4"}}, "fc1");
    const Symbol extra = Symbol::Op("FullyConnected", {x, Symbol::Variable(own)},
                                    {{"num_hidden", "4"}, {"no_bias", "true"}}, "extra");
    const Symbol loss = Symbol::Op("SoftmaxCrossEntropy",
                                   {Symbol::Op("add", {fc1, extra}), Symbol::Variable("label")});
    ExpectErrorContains(
        [&] { Trainer t(loss, kDataShapes, Xavier(), SGD(0.1, 0.9)); },
        {"an argument named '" + std::string(own) + "'", "the trainer uses for its own arrays"});
  }
}

TEST(Trainer, BadBatchesAndNamesAreClearErrors) {
  Trainer trainer(Loss(), kDataShapes, Xavier(), SGD(0.1, 0.9));
  auto batch = Batch(0);
  batch.erase("label");
  ExpectErrorContains([&] { trainer.Step(batch); }, {"the batch has no data input 'label'"});
  batch = Batch(0);
  batch["label"] = NDArray(Shape{kBatch + 1});
  ExpectErrorContains([&] { trainer.Step(batch); },
                      {"data input 'label'", "expected (8,)", "(9,)"});
  batch = Batch(0);
  batch["lable"] = batch.at("label");
  ExpectErrorContains([&] { trainer.Step(batch); },
                      {"no data input named 'lable'", "did you mean 'label'?"});
  EXPECT_EQ(trainer.steps(), 0) << "a bad batch pushed a step";
  ExpectErrorContains([&] { trainer.parameter("fc1_wieght"); },
                      {"no parameter named 'fc1_wieght'", "did you mean 'fc1_weight'?"});
  ExpectErrorContains([&] { trainer.state("fc1_weight.mean"); },
                      {"no optimizer state named 'fc1_weight.mean'"});
  ExpectErrorContains(
      [&] {
        trainer.Predict({{"data", NDArray(Shape{3, kFeatures})}});
      },
      {"Predict: no input 'label'"});
  ExpectErrorContains(
      [&] {
        trainer.Predict({{"data", NDArray(Shape{3, kFeatures})},
                         {"label", NDArray(Shape{3})},
                         {"x", NDArray(Shape{1})}});
      },
      {"'x' is not an input of the inference graph"});
}

TEST(Trainer, LoadRefusesFilesOfAnotherModelOrOptimizerAndChangesNothing) {
  SeedRandom(4);
  Trainer sgd(Loss(), kDataShapes, Xavier(), SGD(0.1, 0.9));
  sgd.Step(Batch(0));
  const auto before = Values(Parameters(sgd));
  const std::string params_only = testing::TempPath("params.safetensors");
  Save(params_only, Parameters(sgd));
  ExpectErrorContains([&] { sgd.Load(params_only); }, {params_only, "is not a trainer's file"});
  Trainer adam(Loss(), kDataShapes, Xavier(), Adam(0.01));
  const std::string adam_file = testing::TempPath("adam.safetensors");
  adam.Save(adam_file);
  ExpectErrorContains([&] { sgd.Load(adam_file); },
                      {adam_file, "holds the state of adam_update", "sgd_mom_update"});
  const Symbol logits =
      Symbol::Op("FullyConnected", {Symbol::Variable("data")}, {{"num_hidden", "4"}}, "fc1");
  Trainer other(Symbol::Op("SoftmaxCrossEntropy", {logits, Symbol::Variable("label")}), kDataShapes,
                Xavier(), SGD(0.1, 0.9));
  const std::string other_file = testing::TempPath("other.safetensors");
  other.Save(other_file);
  ExpectErrorContains([&] { sgd.Load(other_file); },
                      {other_file, "'fc1_bias' is (4,) float32, expected (16,)"});
  EXPECT_EQ(Values(Parameters(sgd)), before);
  EXPECT_EQ(sgd.steps(), 1);
}

}  // namespace
}  // namespace weft
