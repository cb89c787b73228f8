// The pass that folds a Cast to 16 bits into the float32 LayerNorm before it (passes/
// fold_norm_cast.h): a bfloat16-mixed transformer step has its LayerNorms write bfloat16 and no
// _backward_Cast before their backward, trains bit for bit as without the pass (on the CPU; the
// op's test, LayerNorm.OutDtype*, checks the GPU's kernels against the Cast bit for bit), and only
// what may fold is folded.
#include "passes/fold_norm_cast.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "ops/nn/nn_params.h"
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

// After `steps` bfloat16-mixed steps of Block, the pass on or off.
Trained Train(bool fold, int steps) {
  testing::ScopedEnv env("WEFT_FOLD_NORM_CAST", fold ? "1" : "0");
  TrainerOptions options;
  options.device = Device::Cpu();
  options.precision = Precision::kBFloat16Mixed;
  SeedRandom(3);
  Trainer t(Block(), {{"data", Shape{kBatch, kWidth}}, {"label", Shape{kBatch}}}, Xavier(),
            AdamW(0.01, 0.9, 0.95, 1e-8, 0.1, 1.0 / kBatch), options);
  for (int k = 0; k < steps; ++k) {
    std::vector<float> x(kBatch * kWidth), y(kBatch);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((7 * i + 3 * k) % 11) / 5 - 1;
    for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>((i + k) % kClasses);
    t.Step({{"data", NDArray::FromVector(x, Shape{kBatch, kWidth})},
            {"label", NDArray::FromVector(y, Shape{kBatch})}});
  }
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

}  // namespace
}  // namespace weft
