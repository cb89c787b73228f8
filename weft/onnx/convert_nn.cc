// Converters of ONNX's layers: Gemm and MatMul, Conv, the pooling ops, BatchNormalization
// (inference), Flatten, Reshape and Softmax. 2-D convolution and pooling (NCHW) with symmetric
// pads; what weft does not run is an error naming the attribute and the value.
#include <optional>
#include <string>
#include <vector>

#include "weft/onnx/importer.h"

namespace weft::onnx_import {
namespace {

// A float32 or float64 (rows, cols) tensor transposed, each value times `scale`.
HostTensor Transposed(const HostTensor& t, double scale) {
  const int64_t rows = t.dims[0], cols = t.dims[1];
  const std::vector<double> v = t.Doubles();
  std::vector<float> out(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[c * rows + r] = static_cast<float>(v[r * cols + c] * scale);
  return HostTensor::OfFloats(out, {cols, rows});
}

HostTensor Scaled(const HostTensor& t, double scale, std::vector<int64_t> dims) {
  std::vector<float> out;
  for (double x : t.Doubles()) out.push_back(static_cast<float>(x * scale));
  return HostTensor::OfFloats(out, std::move(dims));
}

// y + beta C, C as the graph reads it.
Symbol PlusScaledC(NodeContext& n, Symbol y, double beta) {
  Symbol c = n.Input(2);
  if (beta != 1) c = n.Op("mul_scalar", {c}, {{"scalar", Number(beta)}});
  return n.Op("add", {y, c});
}

// beta C as a bias of `units` values, where C is known and holds `units` values or one.
std::optional<HostTensor> FoldedBias(NodeContext& n, double beta, int64_t units) {
  const HostTensor* c = n.Known(2);
  if (c == nullptr || (c->Size() != units && c->Size() != 1)) return std::nullopt;
  if (c->Size() == units) return Scaled(*c, beta, {units});
  return HostTensor::OfFloats(std::vector<float>(units, static_cast<float>(c->Doubles()[0] * beta)),
                              {units});
}

// Y = alpha A B' + beta C (B' = B or B^T): a FullyConnected on a known B, whose weight (N, K) and
// bias (N) are folded at import (a C it cannot take as a bias is added after); else a matmul, a
// scale and an add.
std::vector<Value> Gemm(NodeContext& n) {
  const double alpha = n.Float("alpha", 1), beta = n.Float("beta", 1);
  if (n.Int("transA", 0) != 0) n.Unsupported("transA", std::to_string(n.Int("transA", 0)), "0");
  const bool trans_b = n.Int("transB", 0) != 0;
  const HostTensor* b = n.Known(1);
  if (b == nullptr || b->dims.size() != 2 || b->dtype != DType::kFloat32) {
    Symbol w = n.Input(1);
    if (trans_b) w = n.Op("transpose", {w});
    Symbol y = n.Op("matmul", {n.Input(0), w});
    if (alpha != 1) y = n.Op("mul_scalar", {y}, {{"scalar", Number(alpha)}});
    return {Value::Of(n.HasInput(2) ? PlusScaledC(n, y, beta) : y)};
  }
  const HostTensor weight = trans_b ? Scaled(*b, alpha, b->dims) : Transposed(*b, alpha);
  const int64_t units = weight.dims[0];
  std::vector<Symbol> in = {n.Input(0), n.Parameter("weight", weight)};
  const std::optional<HostTensor> bias = n.HasInput(2) ? FoldedBias(n, beta, units) : std::nullopt;
  if (bias) in.push_back(n.Parameter("bias", *bias));
  const Symbol y = n.Op("FullyConnected", in,
                        {{"num_hidden", std::to_string(units)},
                         {"flatten", "false"},
                         {"no_bias", bias ? "false" : "true"}});
  return {Value::Of(n.HasInput(2) && !bias ? PlusScaledC(n, y, beta) : y)};
}

// A FullyConnected over the last axis.
Symbol DenseOp(NodeContext& n, const Symbol& x, const Symbol& weight, int64_t units,
               const std::optional<Symbol>& bias) {
  std::vector<Symbol> in = {x, weight};
  if (bias) in.push_back(*bias);
  return n.Op("FullyConnected", in,
              {{"num_hidden", std::to_string(units)},
               {"flatten", "false"},
               {"no_bias", bias ? "false" : "true"}});
}

// A @ B: on a known 2-D float32 B, a FullyConnected whose weight (N, K) is B laid out at import
// (oneDNN's inner product on a weight it reorders once; an Add of a known bias after it joins it:
// BiasIntoDense); else a matmul.
std::vector<Value> MatMul(NodeContext& n) {
  const HostTensor* b = n.Known(1);
  if (b == nullptr || b->dims.size() != 2 || b->dtype != DType::kFloat32)
    return {Value::Of(n.Op("matmul", {n.Input(0), n.Input(1)}))};
  const HostTensor weight = Transposed(*b, 1);
  Dense dense{n.Input(0), n.Parameter("weight", weight), weight.dims[0]};
  Value v = Value::Of(DenseOp(n, dense.data, dense.weight, dense.units, std::nullopt));
  v.dense = dense;
  return {v};
}

// Add(MatMul's FullyConnected, known bias of its units) read nowhere else: the layer with the bias.
std::optional<Value> BiasIntoDense(NodeContext& n) {
  for (int i : {0, 1}) {
    const Value* v = n.ValueOf(i);
    const HostTensor* bias = n.Known(1 - i);
    if (v == nullptr || !v->dense || n.Uses(i) != 1 || bias == nullptr ||
        bias->dtype != DType::kFloat32 || bias->dims != std::vector<int64_t>{v->dense->units})
      continue;
    const Dense d = *v->dense;
    return Value::Of(DenseOp(n, d.data, d.weight, d.units, n.Parameter("bias", *bias)));
  }
  return std::nullopt;
}

// The 2-D window of a Conv or pooling node: kernel, strides, symmetric pads, dilations.
struct Window {
  std::vector<int64_t> kernel, stride, pad, dilate;
};

Window WindowOf(NodeContext& n, std::vector<int64_t> kernel) {
  Window w{n.Ints("kernel_shape", kernel),
           n.Ints("strides", {1, 1}),
           {0, 0},
           n.Ints("dilations", {1, 1})};
  if (w.kernel.size() != 2) {
    n.Fail("expected a 2-D window (NCHW data), found kernel_shape " + Tuple(w.kernel) +
           "; weft's Convolution and Pooling are 2-D");
  }
  const std::string auto_pad = n.String("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    n.Unsupported("auto_pad", "'" + auto_pad + "'", "'NOTSET' or 'VALID' (explicit pads)");
  const std::vector<int64_t> pads = n.Ints("pads", {0, 0, 0, 0});
  if (pads.size() != 4 || pads[0] != pads[2] || pads[1] != pads[3])
    n.Unsupported("pads", Tuple(pads), "symmetric pads (top, left, top, left)");
  w.pad = {pads[0], pads[1]};
  return w;
}

std::vector<Value> Conv(NodeContext& n) {
  const HostTensor& weight = n.RequireKnown(1, "the weight");
  if (weight.dims.size() != 4)
    n.Fail("expected a 4-D weight (2-D convolution), found " + weight.ShapeOf().ToString());
  const Window w = WindowOf(n, {weight.dims[2], weight.dims[3]});
  std::vector<Symbol> in = {n.Input(0), n.Input(1)};
  if (n.HasInput(2)) in.push_back(n.Input(2));
  return {Value::Of(n.Op("Convolution", in,
                         {{"kernel", Tuple(w.kernel)},
                          {"stride", Tuple(w.stride)},
                          {"pad", Tuple(w.pad)},
                          {"dilate", Tuple(w.dilate)},
                          {"num_filter", std::to_string(weight.dims[0])},
                          {"num_group", std::to_string(n.Int("group", 1))},
                          {"no_bias", n.HasInput(2) ? "false" : "true"}}))};
}

Converter Pool(const std::string& type) {
  return [type](NodeContext& n) {
    const Window w = WindowOf(n, {});
    if (w.dilate != std::vector<int64_t>{1, 1})
      n.Unsupported("dilations", Tuple(w.dilate), "(1, 1)");
    if (n.Int("storage_order", 0) != 0)
      n.Unsupported("storage_order", std::to_string(n.Int("storage_order", 0)), "0 (row major)");
    if (n.node().output_size() > 1) n.Fail("expected one output, found the Indices output too");
    return std::vector<Value>{
        Value::Of(n.Op("Pooling", {n.Input(0)},
                       {{"kernel", Tuple(w.kernel)},
                        {"stride", Tuple(w.stride)},
                        {"pad", Tuple(w.pad)},
                        {"pool_type", type},
                        {"pooling_convention", n.Int("ceil_mode", 0) ? "full" : "valid"},
                        {"count_include_pad", n.Int("count_include_pad", 0) ? "true" : "false"}}))};
  };
}

Converter GlobalPool(const std::string& type) {
  return [type](NodeContext& n) {
    return std::vector<Value>{
        Value::Of(n.Op("Pooling", {n.Input(0)}, {{"global_pool", "true"}, {"pool_type", type}}))};
  };
}

std::vector<Value> BatchNormalization(NodeContext& n) {
  if (n.Int("training_mode", 0) != 0)
    n.Unsupported("training_mode", "1", "0 (inference: the running statistics)");
  if (n.node().output_size() > 1) n.Fail("expected one output (inference), found more");
  std::vector<Symbol> in;
  for (int i = 0; i < 5; ++i) in.push_back(n.Input(i));
  return {Value::Of(n.Op("BatchNorm", in,
                         {{"eps", Number(n.Float("epsilon", 1e-5f))},
                          {"momentum", Number(n.Float("momentum", 0.9f))},
                          {"fix_gamma", "false"},
                          {"use_global_stats", "true"}}))};
}

std::vector<Value> Flatten(NodeContext& n) {
  const int64_t axis = n.Int("axis", 1);
  if (axis == 1) return {Value::Of(n.Op("flatten", {n.Input(0)}))};
  if (axis == 0) return {Value::Of(n.Op("reshape", {n.Input(0)}, {{"shape", "(1, -1)"}}))};
  n.Unsupported("axis", std::to_string(axis), "0 or 1");
}

// A known tensor with ONNX Reshape's `shape` (0 copies an extent, one -1 is inferred).
HostTensor ReshapedKnown(NodeContext& n, const HostTensor& t, const std::vector<int64_t>& shape) {
  HostTensor out = t;
  out.dims = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) {
      if (i >= t.dims.size()) n.Fail("shape " + Tuple(shape) + " copies an extent the input lacks");
      out.dims[i] = t.dims[i];
    }
    if (shape[i] < -1 || (shape[i] == -1 && infer >= 0))
      n.Fail("expected extents >= -1 with at most one -1, found " + Tuple(shape));
    if (shape[i] == -1) {
      infer = static_cast<int64_t>(i);
    } else if (out.dims[i] > 0 && known <= t.Size()) {
      known *= out.dims[i];
    }
  }
  if (infer >= 0) out.dims[infer] = known == 0 ? 0 : t.Size() / known;
  if (known > t.Size() || out.Size() != t.Size()) {
    n.Fail("expected a shape of " + std::to_string(t.Size()) + " values, found " + Tuple(shape) +
           " for " + t.ShapeOf().ToString());
  }
  return out;
}

std::vector<Value> Reshape(NodeContext& n) {
  const std::vector<int64_t> shape = n.RequireKnown(1, "the shape").Int64s();
  if (n.Int("allowzero", 0) != 0) {
    for (int64_t d : shape)
      if (d == 0) n.Unsupported("allowzero", "1 with a 0 in the shape", "0");
  }
  if (const HostTensor* t = n.Known(0)) return {Value::Of(ReshapedKnown(n, *t, shape))};
  return {Value::Of(n.Op("reshape", {n.Input(0)}, {{"shape", Tuple(shape)}}))};
}

std::vector<Value> Softmax(NodeContext& n) {
  const int64_t axis = n.Int("axis", n.opset() >= 13 ? -1 : 1);
  if (n.opset() < 13 && axis != -1) {
    n.Fail(
        "before opset 13 Softmax normalizes the input flattened from `axis` on; expected "
        "axis -1 (where the forms agree), found " +
        std::to_string(axis));
  }
  return {Value::Of(n.Op("softmax", {n.Input(0)}, {{"axis", std::to_string(axis)}}))};
}

}  // namespace

void AddNnConverters(ConverterTable& t) {
  const Converter add = t.at("Add");  // convert_elementwise's
  t["Add"] = [add](NodeContext& n) {
    if (std::optional<Value> v = BiasIntoDense(n)) return std::vector<Value>{*v};
    return add(n);
  };
  t["Gemm"] = Gemm;
  t["MatMul"] = MatMul;
  t["Conv"] = Conv;
  t["MaxPool"] = Pool("max");
  t["AveragePool"] = Pool("avg");
  t["GlobalAveragePool"] = GlobalPool("avg");
  t["GlobalMaxPool"] = GlobalPool("max");
  t["BatchNormalization"] = BatchNormalization;
  t["Flatten"] = Flatten;
  t["Reshape"] = Reshape;
  t["Softmax"] = Softmax;
}

}  // namespace weft::onnx_import
