// The passes that fold a mixed-precision step's casts into the ops beside them:
// - fold_norm_cast (passes/fold_norm_cast.h), a Cast to 16 bits into the float32 LayerNorm before
//   it: a bfloat16-mixed transformer step has its LayerNorms write bfloat16 and no _backward_Cast
//   before their backward, and trains bit for bit as without the pass (on the CPU; the op's test,
//   LayerNorm.OutDtype*, checks the GPU's kernels against the Cast bit for bit);
// - fold_grad_cast (passes/fold_grad_cast.h), the _backward_Casts of a FullyConnected's 16-bit
//   parameter gradients into its backward: the step's float32 master gradients are the unfolded
//   step's before their rounding to bfloat16;
// and only what may fold is folded.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "ops/nn/nn_params.h"
#include "passes/fold_grad_cast.h"
#include "passes/fold_norm_cast.h"
#include "passes/mixed_precision.h"
#include "tests/pass_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::CountOps;

constexpr int64_t kBatch = 8, kWidth = 16, kClasses = 5;

Symbol Fc(Symbol x, const std::string& name, int64_t hidden) {
  return Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(hidden)}}, name);
}

// A pre-LayerNorm residual block and a final LayerNorm before the classifier, as GPT's: in
// bfloat16-mixed the residual stream stays float32 and each LayerNorm's output is cast for the
// FullyConnected after it.
Symbol Block() {
  const Symbol x = Symbol::Variable("data");
  const Symbol ln1 = Symbol::Op("LayerNorm", {x}, {}, "ln1");
  const Symbol mlp = Fc(Symbol::Op("gelu", {Fc(ln1, "fc1", 4 * kWidth)}), "fc2", kWidth);
  const Symbol h = Symbol::Op("add", {x, mlp});
  const Symbol logits = Fc(Symbol::Op("LayerNorm", {h}, {}, "ln_f"), "head", kClasses);
  return Symbol::Op("SoftmaxCrossEntropy", {logits, Symbol::Variable("label")}, {}, "loss");
}

// The pipeline for a bfloat16-mixed training bind of Block on the CPU.
BindResult BindMixed(const Symbol& net) {
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = {{"data", Shape{kBatch, kWidth}}, {"label", Shape{kBatch}}};
  request.precision = PrecisionPolicy{};
  for (const std::string& a : net.ListArguments()) {
    if (a != "data" && a != "label") request.differentiate.insert(a);
  }
  return RunBindPipeline(net.ToGraph(), request);
}

TEST(FoldNormCast, AMixedStepsLayerNormsWriteBfloat16AndTheirBackwardReadsIt) {
  const BindResult on = BindMixed(Block());
  testing::ScopedEnv off_env("WEFT_FOLD_NORM_CAST", "0");
  const BindResult off = BindMixed(Block());
  EXPECT_EQ(on.folded_norm_casts, 2);
  EXPECT_EQ(off.folded_norm_casts, 0);
  EXPECT_EQ(CountOps(off.graph, "_backward_Cast") - CountOps(on.graph, "_backward_Cast"), 2u);
  EXPECT_EQ(CountOps(off.graph, "Cast") - CountOps(on.graph, "Cast"), 2u);
  int written = 0;
  for (const Node& n : on.graph.nodes()) {
    if (n.op == nullptr || n.op->name != "LayerNorm") continue;
    EXPECT_EQ(n.attrs.Get<LayerNormParam>().out_dtype, DType::kBFloat16) << n.name;
    ++written;
  }
  EXPECT_EQ(written, 2);
}

struct Trained {
  std::map<std::string, std::vector<float>> values;  // parameters, optimizer state, loss
  size_t backward_casts = 0;                         // in the step's graph (Trainer::ToDot)
};

// A bfloat16-mixed trainer of Block on the CPU, initialized from `seed`.
std::unique_ptr<Trainer> MixedTrainer(const Optimizer& optimizer, uint64_t seed) {
  TrainerOptions options;
  options.device = Device::Cpu();
  options.precision = Precision::kBFloat16Mixed;
  SeedRandom(seed);
  return std::make_unique<Trainer>(
      Block(),
      std::map<std::string, Shape>{{"data", Shape{kBatch, kWidth}}, {"label", Shape{kBatch}}},
      Xavier(), optimizer, options);
}

// Batch k of Block's data and labels (they depend on k only).
Trainer::ArrayMap BlockBatch(int k) {
  std::vector<float> x(kBatch * kWidth), y(kBatch);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((7 * i + 3 * k) % 11) / 5 - 1;
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>((i + k) % kClasses);
  return {{"data", NDArray::FromVector(x, Shape{kBatch, kWidth})},
          {"label", NDArray::FromVector(y, Shape{kBatch})}};
}

// After `steps` bfloat16-mixed steps of Block, the pass on or off.
Trained Train(bool fold, int steps) {
  testing::ScopedEnv env("WEFT_FOLD_NORM_CAST", fold ? "1" : "0");
  const std::unique_ptr<Trainer> trainer =
      MixedTrainer(AdamW(0.01, 0.9, 0.95, 1e-8, 0.1, 1.0 / kBatch), 3);
  Trainer& t = *trainer;
  for (int k = 0; k < steps; ++k) t.Step(BlockBatch(k));
  Trained out;
  for (const std::string& p : t.parameter_names()) out.values[p] = t.parameter(p).ToVector<float>();
  for (const std::string& s : t.state_names()) out.values[s] = t.state(s).ToVector<float>();
  out.values["loss"] = t.outputs()[0].ToVector<float>();
  const std::string dot = t.ToDot();
  for (size_t at = dot.find("_backward_Cast"); at != std::string::npos;
       at = dot.find("_backward_Cast", at + 1)) {
    ++out.backward_casts;
  }
  return out;
}

TEST(FoldNormCast, AMixedStepTrainsBitForBitAsWithoutThePass) {
  const Trained on = Train(true, 4), off = Train(false, 4);
  EXPECT_EQ(on.values, off.values);
  EXPECT_LT(on.backward_casts, off.backward_casts);
}

// The pairs that stay: an output read by something else too, data that is not float32, a cast to
// float32, a LayerNorm that writes another dtype already.
TEST(FoldNormCast, OnlyALayerNormOfFloat32DataReadByOneCastTo16BitsFolds) {
  const Symbol x = Symbol::Variable("data");
  const auto cast = [](Symbol s, const char* dtype) {
    return Symbol::Op("Cast", {s}, {{"dtype", dtype}});
  };
  const Symbol ln = Symbol::Op("LayerNorm", {x}, {}, "ln");
  const auto folded = [](const Symbol& s, std::map<std::string, DType> dtypes = {}) {
    int n = -1;
    FoldNormCast(s.ToGraph(), dtypes, &n);
    return n;
  };
  EXPECT_EQ(folded(cast(ln, "bfloat16")), 1);
  EXPECT_EQ(folded(cast(ln, "float16")), 1);
  EXPECT_EQ(folded(Symbol::Group({cast(ln, "bfloat16"), Symbol::Op("relu", {ln})})), 0);
  EXPECT_EQ(folded(Symbol::Group({cast(ln, "bfloat16"), ln})), 0) << "an output of the graph";
  EXPECT_EQ(folded(cast(ln, "bfloat16"), {{"data", DType::kBFloat16}}), 0);
  EXPECT_EQ(folded(cast(ln, "float32")), 0);
  EXPECT_EQ(folded(cast(Symbol::Op("LayerNorm", {x}, {{"out_dtype", "float16"}}), "bfloat16")), 0);
  EXPECT_EQ(folded(cast(Symbol::Op("relu", {x}), "bfloat16")), 0);
}

// The graph after pass `name` in `r`.
const Graph& After(const BindResult& r, const std::string& name) {
  for (const BindResult::Pass& p : r.passes) {
    if (p.name == name) return p.graph;
  }
  ADD_FAILURE() << "no pass " << name;
  return r.graph;
}

TEST(FoldGradCast, AMixedStepsFullyConnectedBackwardsWriteFloat32ParameterGradients) {
  const BindResult on = BindMixed(Block());
  const Graph& typed = After(on, "infer_shapes_and_types");
  const Graph& folded = After(on, "fold_grad_cast");
  EXPECT_EQ(on.folded_grad_casts, 3) << "fc1, fc2, head";
  EXPECT_EQ(CountOps(typed, "_backward_Cast") - CountOps(folded, "_backward_Cast"), 6u);
  int written = 0;
  for (uint32_t n = 0; n < folded.nodes().size(); ++n) {
    const Node& node = folded.node(n);
    if (node.op == nullptr || node.op->name != "_backward_FullyConnected") continue;
    EXPECT_EQ(node.attrs.Get<FcParam>().param_grad_dtype, DType::kFloat32) << node.name;
    for (uint32_t k = 1; k < folded.num_outputs(n); ++k)
      EXPECT_EQ(folded.dtypes()[folded.EntryId({n, k})], DType::kFloat32) << node.name;
    ++written;
  }
  EXPECT_EQ(written, 3);
  testing::ScopedEnv off_env("WEFT_FOLD_GRAD_CAST", "0");
  EXPECT_EQ(BindMixed(Block()).folded_grad_casts, 0);
}

// The float32 master gradients of one bfloat16-mixed step of Block, fold_grad_cast on or off.
std::map<std::string, std::vector<float>> FirstGradients(bool fold) {
  testing::ScopedEnv env("WEFT_FOLD_GRAD_CAST", fold ? "1" : "0");
  const std::unique_ptr<Trainer> trainer = MixedTrainer(SGD(0.1), 4);
  Trainer& t = *trainer;
  t.Step(BlockBatch(0));
  std::map<std::string, std::vector<float>> grads;
  for (const std::string& p : t.parameter_names()) grads[p] = t.gradient(p).ToVector<float>();
  return grads;
}

TEST(FoldGradCast, TheMasterGradientsAreTheUnfoldedStepsBeforeTheirRounding) {
  const auto on = FirstGradients(true), off = FirstGradients(false);
  ASSERT_EQ(on.size(), off.size());
  for (const auto& [name, g] : on) {
    if (!name.starts_with("fc") && !name.starts_with("head")) {
      EXPECT_EQ(off.at(name), g) << name << ": not a layer's, computed as before";
      continue;
    }
    std::vector<float> rounded = g;
    for (float& v : rounded) v = BFloat16::FromFloat(v).ToFloat();
    EXPECT_EQ(off.at(name), rounded) << name;
    EXPECT_NE(g, rounded) << name << " is not rounded to bfloat16 any more";
  }
}

// What stays: a parameter gradient read by something else too, or not by a cast to float32,
// float32 data.
TEST(FoldGradCast, OnlyAFullyConnectedOf16BitDataWhoseParameterGradientsOnlyCastsWidenFolds) {
  const Symbol x = Symbol::Variable("data");
  const auto bind = [](const Symbol& loss, std::map<std::string, DType> dtypes) {
    BindRequest request;
    request.device = Device::Cpu();
    request.shapes = {{"data", Shape{4, 6}}};
    request.dtypes = std::move(dtypes);
    request.differentiate = {"w"};
    return RunBindPipeline(loss.ToGraph(), request).folded_grad_casts;
  };
  const Symbol w = Symbol::Variable("w");
  const auto fc = [&](const Symbol& weight) {
    return Symbol::Op("FullyConnected", {x, weight}, {{"num_hidden", "3"}, {"no_bias", "true"}});
  };
  const auto loss = [](const Symbol& y) {
    return Symbol::Op("sum", {Symbol::Op("Cast", {y}, {{"dtype", "float32"}})});
  };
  const Symbol w16 = Symbol::Op("Cast", {w}, {{"dtype", "bfloat16"}});
  const std::map<std::string, DType> data16 = {{"data", DType::kBFloat16}};
  EXPECT_EQ(bind(loss(fc(w16)), data16), 1);
  EXPECT_EQ(bind(loss(fc(w)), {}), 0) << "float32 data";
  EXPECT_EQ(bind(loss(fc(w16)), {{"data", DType::kBFloat16}, {"w", DType::kBFloat16}}), 0)
      << "the weight is bfloat16 itself: no cast";
  // w's gradient sums the layer's (through the cast) and another reader's: the cast's output is
  // read by the sum, but the layer's gradient is read by the cast alone: it still folds
  const Symbol twice =
      Symbol::Op("add", {loss(fc(w16)), Symbol::Op("sum", {Symbol::Op("square", {w})})});
  EXPECT_EQ(bind(twice, data16), 1);
}

}  // namespace
}  // namespace weft
