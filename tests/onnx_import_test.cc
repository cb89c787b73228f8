// ONNX import (weft/onnx.h) of models PyTorch 1.13's exporter wrote (tests/onnx/export_models.py:
// an MLP, the same with external data, a CNN, a CNN with BatchNorm, pooling and Softmax), each
// bound on the CPU and run on the input the script ran: weft's outputs equal PyTorch's (written by
// the script) and ONNX Runtime 1.30's (tools/ort/run.js, run here on the same file) within 1e-4
// relative. Models weft must refuse (an unknown op, an attribute value it does not run, an opset
// out of range, a truncated file, a file that is not a model) give a weft::Error naming what was
// expected and what was found.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "executor/executor.h"
#include "graph/graph.h"
#include "passes/pipeline.h"
#include "tests/onnx_cases.h"
#include "tests/weft_test_util.h"
#include "weft/onnx.h"
#include "weft/serialization.h"

namespace weft {
namespace {

const std::string kDir = "tests/onnx/";

// The model's output for the script's inputs, bound and run on the CPU.
std::vector<float> RunOnCpu(const OnnxModel& m, const testing::OnnxCase& e) {
  const NDArray out = testing::RunOnnxCase(m, e, Device::Cpu());
  if (!e.output.empty()) {
    EXPECT_EQ(out.shape(), e.output_shape);
  }
  return out.ToVector<float>();
}

// How many nodes of `op` a bound graph's DOT (Executor::ToDot) draws.
int CountInDot(const std::string& dot, const std::string& op) {
  int n = 0;
  for (size_t at = dot.find("\\n" + op + "\""); at != std::string::npos;
       at = dot.find("\\n" + op + "\"", at + 1))
    ++n;
  return n;
}

// The model bound on the CPU for the case's input shapes (zeros).
std::unique_ptr<Executor> BindCase(const OnnxModel& m, const testing::OnnxCase& c) {
  Executor::ArrayMap args = m.params;
  for (const auto& [name, input] : c.inputs) {
    NDArray a(input.shape, Device::Cpu(), input.dtype);
    a.Fill(0);
    args[name.empty() ? m.inputs.at(0).name : name] = a;
  }
  return Executor::Bind(m.symbol, Device::Cpu(), args);
}

// Runs `command` in a shell: its exit status and what it wrote on stdout.
std::pair<int, std::string> Shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  std::string text;
  char buffer[4096];
  while (pipe != nullptr && fgets(buffer, sizeof(buffer), pipe) != nullptr) text += buffer;
  return {pipe == nullptr ? -1 : pclose(pipe), text};
}

// ONNX Runtime's output for the model's inputs as `json` gives them (tools/ort/run.js, which
// tools/setup.sh installs), and its version.
std::pair<std::vector<float>, std::string> OrtOutput(const std::string& model,
                                                     const std::string& json) {
  const std::string errors = testing::TempPath("ort_stderr.txt");
  const std::string command = "node tools/ort/run.js " + model + " " + json + " 2>" + errors;
  const auto [status, text] = Shell(command);
  if (status != 0) {
    std::ifstream err(errors);
    std::stringstream why;
    why << err.rdbuf();
    ADD_FAILURE() << "ONNX Runtime did not run (tools/setup.sh installs it in tools/ort): "
                  << command << ": " << text << why.str();
    return {};
  }
  const nlohmann::json j = nlohmann::json::parse(text);
  return {j["output"].get<std::vector<float>>(), j["version"].get<std::string>()};
}

void ExpectNearAll(const std::vector<float>& got, const std::vector<float>& want,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << what << " output " << i;
}

// The model `name` in `dir` (its .onnx) on the inputs of `json` (its .json by default) against
// PyTorch's and ONNX Runtime's outputs.
void ExpectMatchesPyTorchAndOrt(const std::string& name, const std::string& dir = kDir,
                                std::string json = "") {
  if (json.empty()) json = name;
  const OnnxModel m = ImportOnnx(dir + name + ".onnx");
  const testing::OnnxCase e = testing::ReadOnnxCase(dir + json + ".json");
  const std::vector<float> got = RunOnCpu(m, e);
  if (!e.output.empty()) ExpectNearAll(got, e.output, json + " against PyTorch");
  const auto [ort, version] = OrtOutput(dir + name + ".onnx", dir + json + ".json");
  EXPECT_EQ(version, "1.30.0");
  ExpectNearAll(got, ort, json + " against ONNX Runtime");
}

// Each committed PyTorch export at opset 13 and at opset 17.
TEST(OnnxImport, AnMlpMatchesPyTorchAndOnnxRuntime) {
  ExpectMatchesPyTorchAndOrt("mlp");
  ExpectMatchesPyTorchAndOrt("mlp_opset17");
}
TEST(OnnxImport, InitializersInAnExternalDataFileLoad) { ExpectMatchesPyTorchAndOrt("mlp_ext"); }
TEST(OnnxImport, ACnnMatchesPyTorchAndOnnxRuntime) {
  ExpectMatchesPyTorchAndOrt("cnn");
  ExpectMatchesPyTorchAndOrt("cnn_opset13");
}
// Transpose, Unsqueeze, ReduceMean, Concat, Pow, LayerNormalization, Gather, Where, Split and Cast
// in one hand-made opset-17 graph, against ONNX Runtime.
TEST(OnnxImport, TensorOpsMatchOnnxRuntime) { ExpectMatchesPyTorchAndOrt("tensor_ops"); }

// nn.TransformerEncoder with a key padding mask: the exporter's shape arithmetic on the symbolic
// batch and sequence extents (Shape, Gather, Mul, Concat, Reshape, Expand, ConstantOfShape) is
// folded at import, so the one file runs at 2 x 7 and at 3 x 5 positions.
TEST(OnnxImport, ATransformerEncoderWithAPaddingMaskMatchesPyTorchAndOnnxRuntime) {
  for (const std::string name : {"encoder", "encoder_opset17"}) {
    ExpectMatchesPyTorchAndOrt(name);
    ExpectMatchesPyTorchAndOrt(name, kDir, name + "_1");
  }
}

// Slice (a middle, a whole symbolic axis with an end past it, and Shape(x) sliced into a reshape
// target, a Mod of a multiple of the batch and a Squeeze of a value computed at run time, as
// PyTorch 2 exports), Expand (a grown column; a
// target that equals the input's own shape through Where(Equal(Shape))), ConstantOfShape of a
// symbolic shape, at batch 2 and 5 from one file, against ONNX Runtime.
TEST(OnnxImport, SliceExpandAndConstantOfShapeOnASymbolicBatchMatchOnnxRuntime) {
  ExpectMatchesPyTorchAndOrt("shape_ops");
  ExpectMatchesPyTorchAndOrt("shape_ops", kDir, "shape_ops_1");
}

// tests/gpt_torch_cases.py's GPT: token embedding (Gather), positions (Range), a causal mask
// (Trilu, Where), tanh GELU, tied logits, at batch 2 and 3 from one file, opsets 14 (Trilu's
// first; PyTorch 1.13 exports triu at no earlier one) and 17.
TEST(OnnxImport, TheGptMatchesPyTorchAndOnnxRuntime) {
  for (const std::string name : {"gpt", "gpt_opset14"}) {
    ExpectMatchesPyTorchAndOrt(name);
    ExpectMatchesPyTorchAndOrt(name, kDir, name + "_1");
  }
}

// What the import leaves of that arithmetic: no integer tensor became a parameter, no take
// gathers extents; the reshapes whose targets hold two symbolic extents read them from the inputs
// (reshape_dims), the others are plain reshapes (0 copies an extent, -1 infers one).
TEST(OnnxImport, TheEncodersShapeArithmeticLeavesNoOpBehind) {
  const OnnxModel m = ImportOnnx(kDir + "encoder.onnx");
  for (const auto& [name, array] : m.params) EXPECT_EQ(array.dtype(), DType::kFloat32) << name;
  std::map<std::string, int> ops;
  const Graph g = m.symbol.ToGraph();
  for (const Node& node : g.nodes())
    if (!node.is_variable()) ++ops[node.op->name];
  EXPECT_FALSE(ops.contains("take"));
  EXPECT_EQ(ops["reshape_dims"], 4);  // (T * B, 64) -> (T, B, 64) and (B, 4, 1, S) -> (4 B, 1, S)
  EXPECT_EQ(ops["reshape"], 10);
  EXPECT_EQ(ops["matmul"], 4);          // attention's products
  EXPECT_EQ(ops["FullyConnected"], 8);  // the linear layers, their MatMul + Add joined
  EXPECT_EQ(ops["add"],
            14);  // a layer: 2 residuals, the mask, 2 in each of 2 LayerNorms (opset 13)
}

// With WEFT_ONNX_FUSE_ATTENTION=1 the attention PyTorch writes out (q scaled, MatMul with k^T, the
// mask added or filled in, Softmax, MatMul with v) imports as one Attention a layer, reading k
// through the transpose the export had for k^T: no matmul or softmax is left, no more transposes
// than the plain import's, and the outputs still match PyTorch's and ONNX Runtime's.
TEST(OnnxImport, AttentionWrittenOutImportsAsOneAttentionOpWhenAsked) {
  const auto count = [](const std::string& name) {
    std::map<std::string, int> ops;
    const Graph g = ImportOnnx(kDir + name + ".onnx").symbol.ToGraph();
    for (const Node& node : g.nodes())
      if (!node.is_variable()) ++ops[node.op->name];
    return ops;
  };
  for (const std::string name : {"encoder", "encoder_opset17", "gpt", "gpt_opset14"}) {
    const std::map<std::string, int> plain = count(name);
    EXPECT_EQ(plain.count("Attention"), 0u) << name;
    testing::ScopedEnv on("WEFT_ONNX_FUSE_ATTENTION", "1");
    std::map<std::string, int> fused = count(name);
    EXPECT_EQ(fused["Attention"], 2) << name;
    EXPECT_EQ(fused["matmul"], 0) << name;
    EXPECT_EQ(fused["softmax"], 0) << name;
    EXPECT_LE(fused["transpose"], plain.at("transpose")) << name;
    ExpectMatchesPyTorchAndOrt(name);
    ExpectMatchesPyTorchAndOrt(name, kDir,
                               name == "encoder_opset17" ? "encoder_opset17_1" : name + "_1");
  }
}

// Attention written out by hand: q and k^T each scaled and a mask added folds (the scales
// multiplied into Attention's); a scale after the mask ((s + mask) c is no s c + mask) and a mask
// that gives 3-D scores a fourth axis do not. All three match ONNX Runtime either way.
TEST(OnnxImport, TheAttentionFoldTakesOnlyWhatAttentionComputes) {
  testing::ScopedEnv on("WEFT_ONNX_FUSE_ATTENTION", "1");
  for (const auto& [name, folds] :
       std::vector<std::pair<std::string, bool>>{{"attention_sdpa", true},
                                                 {"attention_scaled_after_mask", false},
                                                 {"attention_mask_broadcasts", false}}) {
    std::map<std::string, int> ops;
    const Graph g = ImportOnnx(kDir + name + ".onnx").symbol.ToGraph();
    for (const Node& node : g.nodes())
      if (!node.is_variable()) ++ops[node.op->name];
    EXPECT_EQ(ops["Attention"], folds ? 1 : 0) << name;
    EXPECT_EQ(ops["softmax"], folds ? 0 : 1) << name;
    ExpectMatchesPyTorchAndOrt(name);
  }
}

// PyTorch 2's packed attention projection, by hand: its Gathers of one position become slices,
// and the bound graph reads each head's (B*H, T, D) straight out of the projection, one copy
// each (passes/compose_moves.h); the result matches ONNX Runtime.
TEST(OnnxImport, PackedHeadsAreGatheredAsSlicesAndReadOnceEach) {
  const OnnxModel m = ImportOnnx(kDir + "packed_heads.onnx");
  const Graph g = m.symbol.ToGraph();
  std::map<std::string, int> ops;
  for (const Node& node : g.nodes())
    if (!node.is_variable()) ++ops[node.op->name];
  EXPECT_EQ(ops["take"], 0);
  EXPECT_EQ(ops["slice"], 4);
  BindRequest request;
  request.device = Device::Cpu();
  request.shapes = {{"p", Shape{5, 2, 24}}};
  const BindResult bound = RunBindPipeline(g, request);
  EXPECT_EQ(bound.composed_moves, 3);
  std::map<std::string, int> bound_ops;
  for (const Node& node : bound.graph.nodes())
    if (!node.is_variable()) ++bound_ops[node.op->name];
  EXPECT_EQ(bound_ops["_strided_copy"], 3);
  EXPECT_EQ(bound_ops["transpose"] + bound_ops["slice"], 0);
  ExpectMatchesPyTorchAndOrt("packed_heads");
}

TEST(OnnxImport, BatchNormPoolingAndSoftmaxMatchPyTorchAndOnnxRuntime) {
  ExpectMatchesPyTorchAndOrt("bn_cnn");
  ExpectMatchesPyTorchAndOrt("bn_cnn_opset17");
}

// Full-size torchvision models, exported here by the committed script with Debian's python3
// (/usr/bin/python3: PyTorch 1.13 and
// torchvision 0.14, which tools/setup.sh installs): resnet18 and mobilenet_v2 (depthwise
// convolutions, ReLU6 as Clip) at opsets 13 and 17, a batch of two 224x224 images.
TEST(OnnxImport, TorchvisionResnet18AndMobilenetV2MatchPyTorchAndOnnxRuntime) {
  const std::string dir = testing::TempPath("torchvision") + "/";
  const std::string command = "mkdir -p " + dir +
                              " && /usr/bin/python3 tests/onnx/export_models.py --torchvision " +
                              dir + " 2>&1";
  const auto [status, text] = Shell(command);
  ASSERT_EQ(status, 0)
      << "the export needs python3-torch and python3-torchvision (tools/setup.sh): " << text;
  for (const char* opset : {"13", "17"}) {
    ExpectMatchesPyTorchAndOrt(std::string("resnet18_opset") + opset, dir);
    ExpectMatchesPyTorchAndOrt(std::string("mobilenet_v2_opset") + opset, dir);
  }
}

// An imported graph is a weft graph like any other: it saves as JSON and safetensors and loads
// back to the same outputs, and its inference bind folds the BatchNorm into the convolution and
// fuses the pointwise ops.
TEST(OnnxImport, AnImportedModelSavesLoadsAndTakesThePasses) {
  const OnnxModel m = ImportOnnx(kDir + "bn_cnn.onnx");
  const testing::OnnxCase c = testing::ReadOnnxCase(kDir + "bn_cnn.json");
  const std::vector<float> before = RunOnCpu(m, c);
  const std::string weights = testing::TempPath("bn_cnn.safetensors");
  Save(weights, m.params);
  OnnxModel loaded = m;
  loaded.symbol = Symbol::FromJson(m.symbol.ToJson());
  loaded.params = Load(weights);
  EXPECT_EQ(RunOnCpu(loaded, c), before);
}

// An inference bind folds conv_bn's BatchNorms into their convolutions (PyTorch's exporter folds
// them itself unless told to keep them), and fuses the encoder's pointwise ops.
TEST(OnnxImport, ImportedGraphsTakeTheInferencePasses) {
  ExpectMatchesPyTorchAndOrt("conv_bn");
  const OnnxModel m = ImportOnnx(kDir + "conv_bn.onnx");
  const std::unique_ptr<Executor> exec = BindCase(m, testing::ReadOnnxCase(kDir + "conv_bn.json"));
  EXPECT_EQ(CountInDot(exec->ToDot("eliminate_common_expr"), "BatchNorm"), 2);
  EXPECT_EQ(CountInDot(exec->ToDot(), "BatchNorm"), 0);
  const OnnxModel enc = ImportOnnx(kDir + "encoder_opset17.onnx");
  const std::unique_ptr<Executor> e = BindCase(enc, testing::ReadOnnxCase(kDir + "encoder.json"));
  EXPECT_GT(e->stats().fused_groups, 0u);
}

TEST(OnnxImport, TheModelSaysItsInputsOutputsOpsetAndProducer) {
  const OnnxModel m = ImportOnnx(kDir + "mlp.onnx");
  EXPECT_EQ(m.opset, 13);
  EXPECT_EQ(m.producer, "pytorch 1.13.0");
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0].name, "data");
  EXPECT_EQ(m.inputs[0].dtype, DType::kFloat32);
  EXPECT_EQ(m.inputs[0].dims, (std::vector<int64_t>{-1, 64}));  // the batch axis is symbolic
  EXPECT_EQ(m.inputs[0].dim_names, (std::vector<std::string>{"batch", ""}));
  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_EQ(m.outputs[0].name, "out");
  EXPECT_EQ(m.params.size(), 6u);  // three weights and three biases
  // A symbolic batch axis stays open until Bind: another batch binds the same graph.
  Executor::ArrayMap args = m.params;
  args["data"] = NDArray(Shape{7, 64}, Device::Cpu());
  args["data"].Fill(0.5);
  const std::unique_ptr<Executor> exec = Executor::Bind(m.symbol, Device::Cpu(), args);
  exec->Forward(false);
  EXPECT_EQ(exec->outputs()[0].shape(), (Shape{7, 10}));
}

// ---- What weft refuses ----

void ExpectImportError(const std::string& path, const std::vector<std::string>& parts) {
  testing::ExpectErrorContains([&] { ImportOnnx(path); }, parts);
}

TEST(OnnxImport, AnUnknownOperatorIsNamedWithItsNodeAndOpsetAndTheSupportedOnes) {
  ExpectImportError(
      kDir + "unsupported_op.onnx",
      {"ONNX node 'the_hardmax' (Hardmax, opset 13)", "does not run the operator 'Hardmax'",
       "it runs", "BatchNormalization", "Conv", "Gemm", "Softmax"});
}

TEST(OnnxImport, AnAttributeValueWeftDoesNotRunIsNamed) {
  ExpectImportError(kDir + "asymmetric_pads.onnx",
                    {"ONNX node 'the_conv' (Conv, opset 13)", "attribute 'pads'", "symmetric",
                     "found (1, 1, 0, 0)"});
}

TEST(OnnxImport, ShapeArithmeticDividingByZeroIsRefused) {
  ExpectImportError(kDir + "divide_by_zero.onnx",
                    {"ONNX node 'the_div' (Div, opset 13)", "divisors other than 0, found 0"});
}

// Reshape to (batch + 1, -1): an extent that is no product of the symbolic ones.
TEST(OnnxImport, ShapeArithmeticWeftCannotFollowIsNamed) {
  ExpectImportError(kDir + "symbolic_sum.onnx",
                    {"ONNX node 'the_add' (Add, opset 13)", "shape arithmetic on batch and 1",
                     "no product of the graph's symbolic extents"});
}

// A finding of fuzz/onnx_fuzzer: an Expand to a negative extent once threw std::length_error.
TEST(OnnxImport, AnExpandToANegativeExtentIsRefused) {
  ExpectImportError(kDir + "expand_negative.onnx",
                    {"ONNX node 'the_expand' (Expand, opset 13)", "cannot expand extent 1", "to -3",
                     "a known extent from 2 to 4096 grown from 1"});
}

TEST(OnnxImport, AnOpsetOutOfRangeIsRefused) {
  ExpectImportError(kDir + "opset9.onnx", {"expected opset 11 to 17", "found 9"});
}

TEST(OnnxImport, ATruncatedOrForeignFileSaysWhatWasExpected) {
  std::ifstream in(kDir + "mlp.onnx", std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  const std::string whole = bytes.str();
  for (const auto& [name, content] : std::vector<std::pair<std::string, std::string>>{
           {"truncated.onnx", whole.substr(0, 5000)}, {"text.onnx", "not a model at all\n"}}) {
    const std::string path = testing::WriteTempFile(name, content);
    ExpectImportError(path, {path, "is not a valid ONNX model", "onnx.ModelProto"});
  }
  ExpectImportError(testing::TempPath("missing.onnx"), {"cannot open", "missing.onnx"});
}

// Every operator the issue on ONNX import names, at least.
TEST(OnnxImport, TheSupportedOperatorsAreListed) {
  const std::vector<std::string> ops = SupportedOnnxOps();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  for (const char* op : {"Conv",        "BatchNormalization",
                         "Relu",        "Clip",
                         "Sigmoid",     "Tanh",
                         "Erf",         "Add",
                         "Sub",         "Mul",
                         "Div",         "Pow",
                         "Sqrt",        "MatMul",
                         "Gemm",        "MaxPool",
                         "AveragePool", "GlobalAveragePool",
                         "Flatten",     "Reshape",
                         "Transpose",   "Concat",
                         "Split",       "Slice",
                         "Squeeze",     "Unsqueeze",
                         "Gather",      "Shape",
                         "Constant",    "ConstantOfShape",
                         "Expand",      "Where",
                         "Cast",        "Softmax",
                         "ReduceMean",  "LayerNormalization",
                         "Identity",    "Dropout"}) {
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end()) << op;
  }
}

}  // namespace
}  // namespace weft
