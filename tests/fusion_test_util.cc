#include "tests/fusion_test_util.h"

#include <cmath>
#include <random>
#include <sstream>

#include "core/error.h"
#include "executor/executor.h"
#include "passes/infer.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "tests/weft_test_util.h"

namespace weft::testing {

Symbol Var(const std::string& name) { return Symbol::Variable(name); }
Symbol Op1(const std::string& op, const Symbol& x, AttrMap attrs) {
  return Symbol::Op(op, {x}, attrs);
}
Symbol Op2(const std::string& op, const Symbol& a, const Symbol& b) {
  return Symbol::Op(op, {a, b});
}
Symbol Scalar(const std::string& op, const Symbol& x, double s) {
  return Symbol::Op(op, {x}, {{"scalar", std::to_string(s)}});
}

Symbol Chain(const Symbol& x, double first_scalar) {
  Symbol y = Scalar("add_scalar", Scalar("mul_scalar", x, first_scalar), 0.25);
  y = Scalar("sub_scalar", Scalar("mul_scalar", Op1("relu", y), 0.75), 0.5);
  return Scalar("add_scalar", Scalar("mul_scalar", Op1("sigmoid", y), 2.0), -1.0);
}

Symbol XLNetPattern(const Symbol& x) {
  const Symbol h = Op1("relu", x);  // the input, computed inside the group
  std::vector<Symbol> outs;
  for (int r = 0; r < 12; ++r) {
    Symbol reshaped = Op1("reshape", h, {{"shape", "(16, 8, 4)"}});
    for (int e = 0; e < 12; ++e)
      outs.push_back(Op1("expand_dims", reshaped, {{"axis", std::to_string(e % 4)}}));
  }
  return Symbol::Group(outs);
}

namespace {

std::string Str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
Symbol ExpandDims(const Symbol& x, int axis) {
  return Op1("expand_dims", x, {{"axis", std::to_string(axis)}});
}
Symbol Dense(const Symbol& x, int n, const std::string& name, bool bias = true) {
  return Symbol::Op("FullyConnected", {x},
                    {{"num_hidden", std::to_string(n)},
                     {"flatten", "false"},
                     {"no_bias", bias ? "false" : "true"}},
                    name);
}
Symbol Drop(const Symbol& x, const XLNetBlockConfig& c) {
  return c.dropout == 0 ? x : Op1("Dropout", x, {{"p", Str(c.dropout)}});
}

// The additive mask (B, H, T, T) from the data inputs, as XLNet builds its masks: expand_dims
// chains into pointwise ops (-1e4 masks a key, as BERT's and XLNet's masks do).
// The mask's terms, computed once for the model from its data inputs (as XLNet computes its
// masks once), that every layer then expands and adds up on its own.
struct MaskTerms {
  Symbol padding;   // (B, T): -1e4 at padding, else 0
  Symbol future;    // (T, T): -1e4 where key j > query i, else 0
  Symbol distance;  // (T, T): -|i - j|
  Symbol segment, slopes;
};
MaskTerms XLNetMaskTerms() {
  const Symbol positions = Var("positions");
  const Symbol rel = Op2("sub", ExpandDims(positions, 1),
                         Op1("reshape", positions, {{"shape", "(1, -1)"}}));  // (T, T): i - j
  return {Scalar("mul_scalar", Scalar("rsub_scalar", Var("pad"), 1), -1e4),
          Scalar("mul_scalar", Scalar("minimum_scalar", Op1("relu", Op1("neg", rel)), 1), -1e4),
          Op1("neg", Op1("abs", rel)), Var("segment"), Var("slopes")};
}

// One layer's additive mask (B, H, T, T) from the terms, through expand_dims chains: padding
// (B, 1, 1, T) + causal (1, 1, T, T) + other segment (B, 1, T, T) + slope * distance (1, H, T, T).
Symbol XLNetMask(const MaskTerms& t) {
  const Symbol padding = ExpandDims(ExpandDims(t.padding, 1), 1);
  const Symbol causal = ExpandDims(ExpandDims(t.future, 0), 0);
  const Symbol seg_q = ExpandDims(ExpandDims(t.segment, 2), 1),
               seg_k = ExpandDims(ExpandDims(t.segment, 1), 1);
  const Symbol other_segment = Scalar(
      "mul_scalar", Scalar("minimum_scalar", Op1("square", Op2("sub", seg_q, seg_k)), 1), -0.5);
  const Symbol slopes = ExpandDims(ExpandDims(ExpandDims(t.slopes, 0), 2), 3);  // (1, H, 1, 1)
  const Symbol distance = Op2("mul", slopes, ExpandDims(ExpandDims(t.distance, 0), 0));
  return Op2("add", Op2("add", Op2("add", padding, causal), other_segment), distance);
}

// (B, T, W) -> (B, H, T, D).
Symbol Heads(const Symbol& x, const XLNetBlockConfig& c) {
  const Symbol r = Op1("reshape", x, {{"shape", "(0, 0, " + std::to_string(c.heads) + ", -1)"}});
  return Op1("transpose", r, {{"axes", "(0, 2, 1, 3)"}});
}

// (H, D) -> (1, H, 1, D).
Symbol HeadBias(const std::string& name) { return ExpandDims(ExpandDims(Var(name), 0), 2); }

Symbol XLNetBlock(const Symbol& x, const MaskTerms& terms, const XLNetBlockConfig& c,
                  const std::string& name) {
  const int w = c.width();
  const Symbol h = Symbol::Op("LayerNorm", {x}, {}, name + "_ln1");
  const Symbol qkv =
      Symbol::Op("split", {Dense(h, 3 * w, name + "_qkv")}, {{"num_outputs", "3"}, {"axis", "-1"}});
  const Symbol q = Op2("add", Op2("add", Heads(qkv[0], c), HeadBias(name + "_r_w_bias")),
                       HeadBias(name + "_r_s_bias"));
  const Symbol att =
      Symbol::Op("Attention", {q, Heads(qkv[1], c), Heads(qkv[2], c), XLNetMask(terms)},
                 {{"use_mask", "true"}});
  const Symbol joined =
      Op1("reshape", Op1("transpose", att, {{"axes", "(0, 2, 1, 3)"}}), {{"shape", "(0, 0, -1)"}});
  const Symbol x1 = Op2("add", x, Drop(Dense(joined, w, name + "_proj"), c));
  const Symbol h2 = Symbol::Op("LayerNorm", {x1}, {}, name + "_ln2");
  const Symbol fc = Op2("add", Dense(h2, 4 * w, name + "_fc", false), Var(name + "_fc_bias"));
  const Symbol act = c.gelu_tanh ? Op1("gelu", fc, {{"approximate", "tanh"}}) : Op1("gelu", fc);
  return Op2("add", x1, Drop(Dense(act, w, name + "_out"), c));
}

}  // namespace

Symbol XLNetBlocks(const XLNetBlockConfig& c) {
  const MaskTerms terms = XLNetMaskTerms();
  Symbol x = Var("data");
  for (int i = 0; i < c.layers; ++i) x = XLNetBlock(x, terms, c, "b" + std::to_string(i));
  return Op1("sum", Op2("mul", x, Var("probe")));
}

std::map<std::string, Shape> XLNetBlockShapes(const XLNetBlockConfig& c) {
  const Shape hidden{c.batch, c.seq, c.width()};
  std::map<std::string, Shape> known = {{"data", hidden},
                                        {"probe", hidden},
                                        {"pad", Shape{c.batch, c.seq}},
                                        {"segment", Shape{c.batch, c.seq}},
                                        {"positions", Shape{c.seq}},
                                        {"slopes", Shape{c.heads}}};
  for (int i = 0; i < c.layers; ++i) {
    const std::string b = "b" + std::to_string(i);
    known[b + "_r_w_bias"] = known[b + "_r_s_bias"] = Shape{c.heads, c.head_dim};
    known[b + "_fc_bias"] = Shape{4 * c.width()};
  }
  return InferArgumentShapes(XLNetBlocks(c).ToGraph(), known);
}

bool IsXLNetBlockData(const std::string& name) {
  return name == "data" || name == "probe" || name == "pad" || name == "segment" ||
         name == "positions" || name == "slopes";
}

std::vector<float> XLNetBlockValues(const std::string& name, const Shape& shape, uint64_t seed) {
  std::vector<float> v(shape.Size());
  const int64_t t = shape[shape.ndim() - 1];
  for (int64_t i = 0; i < shape.Size(); ++i) {
    const int64_t row = i / t, col = i % t;
    if (name == "positions") v[i] = static_cast<float>(i);
    if (name == "pad") v[i] = col < t - row ? 1.0f : 0.0f;
    if (name == "segment") v[i] = col < t / 2 ? 0.0f : 1.0f;
    if (name == "slopes") v[i] = std::ldexp(1.0f, -static_cast<int>(i) - 1);
  }
  if (name == "positions" || name == "pad" || name == "segment" || name == "slopes") return v;
  std::mt19937_64 rng(seed + std::hash<std::string>()(name));
  std::uniform_real_distribution<float> u(-1, 1);
  const bool gamma = name.ends_with("_gamma");
  for (float& x : v) x = gamma ? 1 + 0.1f * u(rng) : u(rng);
  return v;
}

std::vector<std::vector<float>> RunXLNetBlocks(const XLNetBlockConfig& c, Device device,
                                               bool fusion) {
  ScopedEnv env("WEFT_USE_FUSION", fusion ? "1" : "0");
  ScopedEnv no_cse("WEFT_ELIMINATE_COMMON_EXPR", "0");
  Executor::ArrayMap args, grads;
  std::map<std::string, GradReq> reqs;
  for (const auto& [name, shape] : XLNetBlockShapes(c)) {
    args[name] = NDArray::FromVector(XLNetBlockValues(name, shape, 5), shape, device);
    if (IsXLNetBlockData(name) && name != "data") continue;
    grads[name] = NDArray(shape, device);
    reqs[name] = GradReq::kWrite;
  }
  SeedRandom(11);
  auto exec = Executor::Bind(XLNetBlocks(c), device, args, grads, reqs);
  if ((exec->stats().fused_groups > 0) != fusion)
    WEFT_THROW("XLNetBlocks: expected fusion " << (fusion ? "on" : "off"));
  exec->Forward(/*is_train=*/true);
  exec->Backward();
  std::vector<std::vector<float>> values = {exec->outputs()[0].ToVector<float>()};
  for (const auto& [name, g] : grads) values.push_back(g.ToVector<float>());
  return values;
}

std::vector<std::shared_ptr<const FusedGroup>> FusedGroupsOf(const Graph& g) {
  std::vector<std::shared_ptr<const FusedGroup>> groups;
  for (const Node& n : g.nodes()) {
    if (!n.is_variable() && n.op->name == "_fused_pointwise")
      groups.push_back(n.attrs.Get<FusedParam>().group);
  }
  return groups;
}

}  // namespace weft::testing
