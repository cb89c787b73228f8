// The registry and imperative invocation: every op the CPU library promises is registered with
// what the layers above need; calls with bad input fail at the call with errors that say why.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/op.h"
#include "storage/ndarray.h"
#include "tests/op_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/imperative.h"

namespace weft {
namespace {

bool IsBackward(const std::string& name) { return name.rfind("_backward_", 0) == 0; }

TEST(OpRegistry, EveryOpHasShapeInferenceAndACpuKernel) {
  const std::vector<std::string> ops = ListOps();
  EXPECT_GE(ops.size(), 40u);
  for (const std::string& name : ops) {
    const Op& op = GetOp(name);
    EXPECT_TRUE(op.infer_shape != nullptr) << name;
    EXPECT_TRUE(op.On(DeviceType::kCpu).compute != nullptr) << name;
    EXPECT_FALSE(op.description.empty()) << name;
    if (op.gradient) {
      EXPECT_FALSE(IsBackward(name)) << name << ": backward ops are not differentiated again";
    }
  }
  // A device's kernel registered from its own file names an op that exists.
  EXPECT_EQ(UnmatchedDeviceImpls(), std::vector<std::string>{});
}

// Valid attributes for every op that has required ones, so that the checks over every op below
// reach those ops too. ExampleAttributesCoverEveryOpThatNeedsThem fails for an op with required
// attributes until it has a row here.
const std::map<std::string, AttrMap>& ExampleAttrs() {
  static const auto* const table = [] {
    auto* t = new std::map<std::string, AttrMap>{
        {"Activation", {{"act_type", "tanh"}}},
        {"_backward_Activation", {{"act_type", "tanh"}}},
        {"clip", {{"a_min", "0"}, {"a_max", "6"}}},
        {"_backward_clip", {{"a_min", "0"}, {"a_max", "6"}}},
        {"FullyConnected", {{"num_hidden", "4"}}},
        {"_backward_FullyConnected", {{"num_hidden", "4"}}},
        {"Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "2"}}},
        {"_backward_Convolution", {{"kernel", "(3, 3)"}, {"num_filter", "2"}}},
        {"Pooling", {{"kernel", "(2, 2)"}}},
        {"_backward_Pooling", {{"kernel", "(2, 2)"}}},
        {"Embedding", {{"input_dim", "5"}, {"output_dim", "3"}}},
        {"RNN", {{"mode", "lstm"}, {"state_size", "4"}}},
        {"_backward_RNN", {{"mode", "lstm"}, {"state_size", "4"}}},
        {"_backward_Embedding", {{"input_dim", "5"}, {"output_dim", "3"}}},
        {"Cast", {{"dtype", "float64"}}},
        // Not required, but they give the rule its most inputs: the mask and dropout's key.
        {"Attention", {{"use_mask", "true"}, {"p", "0.1"}}},
        {"_backward_Attention", {{"use_mask", "true"}, {"p", "0.1"}}},
        {"reshape", {{"shape", "(-1,)"}}},
        {"reshape_dims", {{"shape", "(2*in0[0],)"}}},
        {"expand_dims", {{"axis", "0"}}},
        {"_strided_copy", {{"shape", "(1,)"}, {"walk", "()"}, {"stride", "()"}}},
        {"concat", {{"num_args", "2"}}},
        {"_backward_concat", {{"num_args", "2"}}},
        {"slice", {{"begin", "(0,)"}, {"end", "(1,)"}}},
        {"_backward_slice", {{"begin", "(0,)"}, {"end", "(1,)"}}},
        {"split", {{"num_outputs", "2"}}},
        {"_backward_split", {{"num_outputs", "2"}}},
        {"add_n", {{"num_args", "3"}}},
        {"multi_sum_sq", {{"num_args", "3"}}},
        {"sgd_update", {{"lr", "0.1"}}},
        {"sgd_mom_update", {{"lr", "0.1"}}},
        {"adam_update", {{"lr", "0.1"}}},
        {"adamw_update", {{"lr", "0.1"}}},
    };
#define WEFT_SCALAR_EXAMPLE(name, functor, description, has_scalar) \
  if (has_scalar) t->insert({{#name, {{"scalar", "2"}}}, {"_backward_" #name, {{"scalar", "2"}}}});
    WEFT_UNARY_OPS(WEFT_SCALAR_EXAMPLE)
#undef WEFT_SCALAR_EXAMPLE
    return t;
  }();
  return *table;
}

// The op's example attributes, or none.
AttrMap ExampleAttrsOf(const std::string& op) {
  const auto it = ExampleAttrs().find(op);
  return it == ExampleAttrs().end() ? AttrMap{} : it->second;
}

TEST(OpRegistry, ExampleAttributesCoverEveryOpThatNeedsThem) {
  for (const std::string& name : ListOps()) {
    if (name.rfind("_test_", 0) == 0 || ExampleAttrs().contains(name) || GetOp(name).pass_only)
      continue;
    EXPECT_NO_THROW(ParseAttrs(GetOp(name), {}))
        << name << " has required attributes: give it a row in ExampleAttrs";
  }
  for (const auto& [name, attrs] : ExampleAttrs()) {
    ASSERT_NE(FindOp(name), nullptr) << "ExampleAttrs names an op that does not exist: " << name;
    EXPECT_NO_THROW(ParseAttrs(GetOp(name), attrs)) << name;
  }
}

// Every gradient rule, built with each op's example attributes, calls ops that exist, with
// attributes they accept.
TEST(OpRegistry, BackwardOpsNamedByGradientRulesExist) {
  for (const std::string& name : ListOps()) {
    const Op& op = GetOp(name);
    if (!op.gradient) continue;
    const Attrs attrs = ParseAttrs(op, ExampleAttrsOf(name));
    GradBuilder g(NumInputs(op, attrs), NumOutputs(op, attrs));
    op.gradient(attrs, g);
    for (const GradNode& node : g.nodes()) {
      const Op* backward = FindOp(node.op);
      EXPECT_NE(backward, nullptr) << name << " uses " << node.op;
      if (backward != nullptr) {
        EXPECT_NO_THROW(ParseAttrs(*backward, node.attrs)) << name << " uses " << node.op;
      }
    }
  }
}

// A device's compute registered from its own file (the GPU ops, in the CUDA build) names an op
// that exists: a misspelt name would leave the op without that device's compute.
TEST(OpRegistry, EveryDeviceComputeNamesARegisteredOp) {
  EXPECT_EQ(UnmatchedDeviceImpls(), std::vector<std::string>{});
}

TEST(OpRegistry, PointwiseOpsNameTheirFunctor) {
  for (const char* name :
       {"exp", "relu", "add", "mul", "add_scalar", "erf", "gelu_tanh", "where", "_backward_relu"}) {
    EXPECT_TRUE(GetOp(name).pointwise) << name;
    EXPECT_EQ(GetOp(name).pointwise.functor.rfind("weft::fn::", 0), 0u) << name;
  }
  EXPECT_EQ(GetOp("relu").pointwise.functor, "weft::fn::Relu");
  // gelu's attribute picks its functor.
  const Op& gelu = GetOp("gelu");
  EXPECT_EQ(gelu.pointwise.Functor(ParseAttrs(gelu, {})), "weft::fn::Gelu");
  EXPECT_EQ(gelu.pointwise.Functor(ParseAttrs(gelu, {{"approximate", "tanh"}})),
            "weft::fn::GeluTanh");
  EXPECT_EQ(GetOp("_backward_relu").pointwise.kind, PointwiseKind::kUnaryBackward);
  EXPECT_FALSE(GetOp("FullyConnected").pointwise);
}

// Parameters read as another type than the op parsed them into are an error naming the op, not
// a reinterpreted struct.
TEST(Attrs, ReadingParametersAsTheWrongTypeNamesTheOp) {
  const Attrs scalar = ParseAttrs(GetOp("add_scalar"), {{"scalar", "2.5"}});
  EXPECT_EQ(scalar.Get<ScalarParam>().scalar, 2.5);
  const std::string wrong = testing::ErrorMessage([&] { scalar.Get<ActivationParam>(); });
  EXPECT_NE(wrong.find("op 'add_scalar': parameters are"), std::string::npos) << wrong;
  const Attrs none = ParseAttrs(GetOp("relu"), {});
  const std::string absent = testing::ErrorMessage([&] { none.Get<ScalarParam>(); });
  EXPECT_NE(absent.find("op 'relu' has no parameters"), std::string::npos) << absent;
}

// Closed sets are parsed once into their enum; anything else lists the choices.
TEST(Attrs, ChoicesParseIntoEnumsOnce) {
  EXPECT_EQ(
      ParseAttrs(GetOp("Activation"), {{"act_type", " gelu "}}).Get<ActivationParam>().act_type,
      ActType::kGelu);
  const std::string bad = testing::ErrorMessage([&] {
    ParseAttrs(GetOp("Activation"), {{"act_type", "swish"}});
  });
  EXPECT_NE(
      bad.find("attribute 'act_type': expected one of 'relu' 'relu6' 'sigmoid' 'tanh' 'softrelu' "
               "'gelu' 'gelu_tanh', found 'swish'"),
      std::string::npos)
      << bad;
}

TEST(Invoke, RejectsBadCallsBeforeAnythingRuns) {
  NDArray a(Shape{2, 3}), b(Shape{2, 3});
  a.Fill(1);
  b.Fill(2);
  const auto message = testing::ErrorMessage;
  EXPECT_NE(message([&] {
              Invoke("add", {a, NDArray()});
            }).find("input 1 is a null array"),
            std::string::npos);
  EXPECT_NE(message([&] {
              Invoke("add", {a, b}, {}, {.outputs = {NDArray(Shape{3, 2})}});
            }).find("output 0 must be (2, 3)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              Invoke("relu", {a}, {{"axis", "1"}});
            }).find("unknown attribute 'axis'"),
            std::string::npos);
  EXPECT_NE(message([&] { Invoke("nope", {a}); }).find("unknown op 'nope'"), std::string::npos);
  // Nothing was written: the arrays are intact.
  EXPECT_EQ(a.ToVector<float>(), std::vector<float>(6, 1));
}

TEST(Invoke, RequestsAreHonoured) {
  NDArray x = NDArray::FromVector(std::vector<float>{1, 2, 3}, Shape{3});
  NDArray out = NDArray::FromVector(std::vector<float>{10, 20, 30}, Shape{3});
  Invoke("mul_scalar", {x}, {{"scalar", "2"}}, {.outputs = {out}, .req = {OpReq::kAddTo}});
  EXPECT_EQ(out.ToVector<float>(), (std::vector<float>{12, 24, 36}));
  Invoke("mul_scalar", {x}, {{"scalar", "2"}}, {.outputs = {out}, .req = {OpReq::kNull}});
  EXPECT_EQ(out.ToVector<float>(), (std::vector<float>{12, 24, 36})) << "kNull writes nothing";
  Invoke("neg", {x}, {}, {.outputs = {x}});  // in place
  EXPECT_EQ(x.ToVector<float>(), (std::vector<float>{-1, -2, -3}));
}

TEST(Invoke, BackwardAccumulatesWhenAsked) {
  NDArray x = NDArray::FromVector(std::vector<float>{1, 2, 3}, Shape{3});
  const Op& op = GetOp("square");
  const Attrs attrs = ParseAttrs(op, {});
  NDArray y = Invoke(op, attrs, {x})[0];
  NDArray dy = NDArray::FromVector(std::vector<float>{1, 1, 1}, Shape{3});
  NDArray dx = NDArray::FromVector(std::vector<float>{100, 100, 100}, Shape{3});
  InvokeBackward(op, attrs, {x}, {y}, {dy}, {dx}, {OpReq::kAddTo});
  EXPECT_EQ(dx.ToVector<float>(), (std::vector<float>{102, 104, 106}));
  InvokeBackward(op, attrs, {x}, {y}, {dy}, {dx}, {OpReq::kWrite});
  EXPECT_EQ(dx.ToVector<float>(), (std::vector<float>{2, 4, 6}));
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

TEST(Invoke, AnOutputMayAliasAnInputOnlyWhereTheOpAllowsIt) {
  NDArray a = NDArray::Arange(6).Reshape(Shape{2, 3});
  // transpose cannot work in place: writing its output over its input would corrupt it.
  try {
    Invoke("transpose", {a.Reshape(Shape{3, 2})}, {}, {.outputs = {a}});
    FAIL() << "an aliasing output was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot work in place"), std::string::npos) << e.what();
  }
  // Disjoint parts of one array are fine.
  NDArray b = NDArray::Arange(8).Reshape(Shape{4, 2});
  Invoke("neg", {b.Slice(0, 2)}, {}, {.outputs = {b.Slice(2, 4)}});
  EXPECT_EQ(b.ToVector<float>(), (std::vector<float>{0, 1, 2, 3, -0.0f, -1, -2, -3}));
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// The error of calling `op` with `attrs` and one input too many, or "<no error>".
std::string OneInputTooManyError(const Op& op, const AttrMap& attrs) {
  try {
    const Attrs parsed = ParseAttrs(op, attrs);
    std::vector<NDArray> inputs;
    for (int i = 0; i <= NumInputs(op, parsed); ++i) inputs.emplace_back(Shape{2});
    for (const NDArray& out : Invoke(op, parsed, inputs)) out.WaitToRead();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Every registered op, backward ops included, rejects a call with the wrong number of inputs
// (or, when it needs attributes, a call without them) with an error that names it.
TEST(OpRegistry, EveryOpRejectsBadInputWithAnErrorNamingIt) {
  for (const std::string& name : ListOps()) {
    if (name.rfind("_test_", 0) == 0 || GetOp(name).pass_only)
      continue;  // pass_only: ops_fusion_test
    const Op& op = GetOp(name);
    const std::string message = OneInputTooManyError(op, {});
    EXPECT_NE(message.find(name), std::string::npos) << name << ": " << message;
    EXPECT_TRUE(message.find("input(s), found") != std::string::npos ||
                message.find("required") != std::string::npos)
        << name << ": " << message;
  }
}

// The same with each op's example attributes: ops with required attributes check their input
// count too.
TEST(OpRegistry, EveryOpRejectsTheWrongInputCountWithItsExampleAttributes) {
  for (const std::string& name : ListOps()) {
    if (name.rfind("_test_", 0) == 0 || GetOp(name).pass_only) continue;
    const Op& op = GetOp(name);
    const AttrMap attrs = ExampleAttrsOf(name);
    const std::string message = OneInputTooManyError(op, attrs);
    const std::string expected = std::to_string(NumInputs(op, ParseAttrs(op, attrs)));
    EXPECT_NE(message.find("op '" + name + "': expected " + expected + " input(s), found"),
              std::string::npos)
        << name << ": " << message;
  }
}

}  // namespace
}  // namespace weft
