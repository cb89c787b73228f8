// The import of one ONNX graph (weft/onnx.h's ImportOnnx): the values its names stand for while the
// nodes are converted in order, and the node-level view each op's converter gets. A converter maps
// one ONNX node to weft ops (or to a constant it computes now: shape arithmetic is folded here, so
// the bound graph has none of it); a table maps each op type to its converter, one file per family
// (convert_elementwise.cc, convert_nn.cc, convert_tensor.cc).
#pragma once

#include <onnx/onnx_pb.h>  // onnx-ml.pb.h (ONNX_ML, set by //tools/deps:onnx_proto)

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/symbol.h"
#include "storage/ndarray.h"
#include "weft/onnx/dims.h"
#include "weft/onnx/tensor.h"

namespace weft::onnx_import {

// What a name of the graph stands for: a tensor known now, a symbol computed at run time, a
// known tensor that the graph also reads (then a parameter, with its symbol), or shape
// arithmetic on symbolic extents (onnx/dims.h).
// A FullyConnected without bias on a known weight (a MatMul's): an Add of a known bias after it
// becomes the layer's own bias.
struct Dense {
  Symbol data, weight;
  int64_t units = 0;
};

// A step of scaled dot-product attention written out (convert_attention.cc), with `symbol`: what
// the value is on the way to Attention(q, k, v[, mask], scale).
struct AttentionStep {
  enum Stage {
    kOperand,        // transpose(x, x_perm) times `scale` (Mul or Div by a known number)
    kScores,         // q k^T times `scale`, plus `mask` where it has one
    kProbabilities,  // softmax of the scores over their last axis
  };
  Stage stage = kOperand;
  // kOperand: the value it scales or transposes; x_perm empty where there is no transpose.
  Symbol x;
  std::vector<int64_t> x_perm;
  // kScores, kProbabilities: q = transpose(q_src, q_perm), k (..., Tk, D) = transpose(k_src,
  // k_perm); an empty perm is none.
  Symbol q_src, k_src;
  std::vector<int64_t> q_perm, k_perm;
  std::optional<Symbol> mask;
  double scale = 1;
};

struct Value {
  std::optional<HostTensor> constant;
  std::optional<Symbol> symbol;
  std::optional<DimTensor> dims;
  std::optional<Dense> dense;              // with `symbol`: what it computes
  std::optional<AttentionStep> attention;  // with `symbol`: what it is a step of
  static Value Of(Symbol s) { return {std::nullopt, std::move(s), std::nullopt, std::nullopt, {}}; }
  static Value Of(HostTensor t) {
    return {std::move(t), std::nullopt, std::nullopt, std::nullopt, {}};
  }
  // Known extents become a known tensor.
  static Value Of(DimTensor d) {
    if (d.IsKnown()) return Of(d.ToHost());
    return {std::nullopt, std::nullopt, std::move(d), std::nullopt, {}};
  }
};

// The state of one import: every value by name and the parameters the graph reads.
struct ImportState {
  std::string dir;  // the model's folder: external data
  int64_t opset = 0;
  std::map<std::string, Value> values;
  std::map<std::string, NDArray> params;
  std::map<std::string, int> node_names;  // weft node names given so far (kept unique)
  SymbolicInputs inputs;                  // the graph inputs' extents, some symbolic
  std::map<std::string, int> uses;        // readers of each value (nodes and graph outputs)
};

// One node as its converter sees it.
class NodeContext {
 public:
  NodeContext(const onnx::NodeProto& node, ImportState& state) : node_(node), state_(state) {}

  const onnx::NodeProto& node() const { return node_; }
  // The node's name, or its first output's (or its op type's) where it has none.
  std::string Name() const;
  // "ONNX node 'name' (OpType, opset N)": what the node's errors start with.
  std::string Where() const;
  int64_t opset() const { return state_.opset; }
  // Input i is given (ONNX leaves an optional input out with an empty name).
  bool HasInput(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }
  // Input i as a symbol: a known tensor becomes a parameter of the graph, named as in the file.
  Symbol Input(int i);
  // Input i's value (null where it names none), and how many readers it has in the file.
  const Value* ValueOf(int i) const;
  int Uses(int i) const;
  // Input i's tensor when it is known now, else null.
  const HostTensor* Known(int i) const;
  // Input i's tensor, which must be known now (`what` says what it is, for the error).
  const HostTensor& RequireKnown(int i, const std::string& what) const;
  // Input i as one number known now.
  double Scalar(int i, const std::string& what) const;
  // Input i as integers of shape arithmetic (known, or symbolic extents), else nullopt.
  std::optional<DimTensor> Integers(int i) const;
  // The extents of a value computed at run time, some symbolic; `what` names it for the error
  // where an extent is no product of symbolic ones.
  std::vector<SymDim> ShapeOf(const Symbol& x, const std::string& what) const;
  // The dtype of a value computed at run time.
  DType DTypeOf(const Symbol& x) const;
  // "4*batch": an extent as the errors write it.
  std::string Text(const SymDim& d) const { return d.ToString(state_.inputs.vars); }
  // The graph input that gives variable `var` its extent.
  struct VarSource {
    std::string input;
    Symbol symbol;
    int axis;
  };
  VarSource SourceOf(int var) const;
  // A parameter made by the import (a folded weight), named after this node.
  Symbol Parameter(const std::string& suffix, const HostTensor& t);

  bool HasAttr(const std::string& name) const;
  int64_t Int(const std::string& name, int64_t fallback) const;
  float Float(const std::string& name, float fallback) const;
  std::string String(const std::string& name, const std::string& fallback) const;
  std::vector<int64_t> Ints(const std::string& name, std::vector<int64_t> fallback) const;
  const onnx::TensorProto* TensorAttr(const std::string& name) const;

  // A weft op on `inputs`, named after this node (unique within the graph).
  Symbol Op(const std::string& op, const std::vector<Symbol>& inputs, const AttrMap& attrs = {});

  // The error for what this node asks that weft cannot run: names the node, its type and the
  // opset.
  [[noreturn]] void Fail(const std::string& message) const;
  // The error for an attribute value weft does not run.
  [[noreturn]] void Unsupported(const std::string& attr, const std::string& found,
                                const std::string& expected) const;

 private:
  const onnx::AttributeProto* Attr(const std::string& name) const;
  const onnx::NodeProto& node_;
  ImportState& state_;
};

// A converter gives one Value per output of its node that it produces (at least the first).
using Converter = std::function<std::vector<Value>(NodeContext&)>;
using ConverterTable = std::map<std::string, Converter>;

void AddElementwiseConverters(ConverterTable& table);
void AddNnConverters(ConverterTable& table);
void AddTensorConverters(ConverterTable& table);
void AddShapeConverters(ConverterTable& table);      // it wraps some of the others
void AddAttentionConverters(ConverterTable& table);  // last: it wraps MatMul, Mul, Div, Add, ...

// Every converter, by ONNX op type (the default domain).
const ConverterTable& Converters();

// The most elements a tensor computed at import may have (ConstantOfShape, Range): 2^20, 4 MB of
// float32 (a 1024 x 1024 mask). Larger ones are an error, not seconds of folding.
inline constexpr int64_t kMaxFoldedElements = int64_t{1} << 20;
inline constexpr const char* kMaxFoldedText = "2^20";

// The axes of a node: the input `input` (from `opset_as_input` on) or the attribute "axes".
std::vector<int64_t> AxesOf(NodeContext& n, int input, int64_t opset_as_input);
// `axis` counted from the front of a rank-`rank` tensor; an error outside [-rank, rank).
int64_t Normalized(NodeContext& n, int64_t axis, int64_t rank);

// "(a, b)": an int list as weft's attributes write tuples.
std::string Tuple(const std::vector<int64_t>& values);
// A float attribute value, every digit kept (std::to_string keeps six decimals).
std::string Number(double value);

}  // namespace weft::onnx_import
