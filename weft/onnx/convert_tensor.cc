// Converters of ONNX's tensor ops: Transpose, Concat, Unsqueeze, Squeeze, Gather, Split, Cast,
// Where, ReduceMean, Pow and LayerNormalization. On known tensors Unsqueeze, Squeeze and Cast run
// at import; on values computed at run time they become weft's ops (shape arithmetic on integers
// is convert_shape.cc's, which wraps these).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "weft/onnx/importer.h"
#include "weft/onnx/reader.h"

namespace weft::onnx_import {
namespace {

std::vector<Value> Transpose(NodeContext& n) {
  const std::vector<int64_t> perm = n.Ints("perm", {});
  return {Value::Of(n.Op("transpose", {n.Input(0)}, {{"axes", Tuple(perm)}}))};
}

std::vector<Value> Concat(NodeContext& n) {
  std::vector<Symbol> in;
  for (int i = 0; i < n.node().input_size(); ++i) in.push_back(n.Input(i));
  return {Value::Of(
      n.Op("concat", in,
           {{"num_args", std::to_string(in.size())}, {"dim", std::to_string(n.Int("axis", 0))}}))};
}

std::vector<Value> Unsqueeze(NodeContext& n) {
  std::vector<int64_t> axes = AxesOf(n, 1, 13);
  if (const HostTensor* t = n.Known(0)) {
    HostTensor out = *t;
    const int64_t rank = static_cast<int64_t>(t->dims.size() + axes.size());
    for (int64_t& a : axes) a = Normalized(n, a, rank);
    std::sort(axes.begin(), axes.end());
    for (int64_t a : axes) out.dims.insert(out.dims.begin() + a, 1);
    return {Value::Of(out)};
  }
  for (int64_t a : axes) {
    if (a < 0) n.Fail("expected axes >= 0 for a value computed at run time, found " + Tuple(axes));
  }
  std::sort(axes.begin(), axes.end());
  Symbol x = n.Input(0);
  for (int64_t a : axes) x = n.Op("expand_dims", {x}, {{"axis", std::to_string(a)}});
  return {Value::Of(x)};
}

std::vector<Value> Squeeze(NodeContext& n) {
  const HostTensor& t = n.RequireKnown(0, "the squeezed tensor");
  std::vector<int64_t> axes = AxesOf(n, 1, 13);
  const int64_t rank = static_cast<int64_t>(t.dims.size());
  for (int64_t& a : axes) a = Normalized(n, a, rank);
  HostTensor out = t;
  out.dims.clear();
  for (int64_t a = 0; a < rank; ++a) {
    const bool named = std::find(axes.begin(), axes.end(), a) != axes.end();
    if (named && t.dims[a] != 1)
      n.Fail("expected extent 1 on the squeezed axis " + std::to_string(a));
    if (!(named || (axes.empty() && t.dims[a] == 1))) out.dims.push_back(t.dims[a]);
  }
  return {Value::Of(out)};
}

std::vector<Value> Gather(NodeContext& n) {
  const int64_t axis = n.Int("axis", 0);
  return {Value::Of(n.Op("take", {n.Input(0), n.Input(1)}, {{"axis", std::to_string(axis)}}))};
}

std::vector<Value> Split(NodeContext& n) {
  const int outputs = n.node().output_size();
  const int64_t axis = n.Int("axis", 0);
  std::vector<int64_t> sizes = n.opset() >= 13 && n.HasInput(1)
                                   ? n.RequireKnown(1, "the split sizes").Int64s()
                                   : n.Ints("split", {});
  for (int64_t s : sizes) {
    if (s != sizes[0]) n.Fail("expected equal parts (weft's split), found sizes " + Tuple(sizes));
  }
  const Symbol parts =
      n.Op("split", {n.Input(0)},
           {{"num_outputs", std::to_string(outputs)}, {"axis", std::to_string(axis)}});
  std::vector<Value> out;
  for (int i = 0; i < outputs; ++i) out.push_back(Value::Of(parts[i]));
  return out;
}

std::vector<Value> Cast(NodeContext& n) {
  const int64_t to = n.Int("to", 1);
  const DType dtype = DTypeOfOnnx(static_cast<int32_t>(to), n.Where() + ": attribute 'to'");
  if (const HostTensor* t = n.Known(0)) {  // known values made floats (integers: convert_shape)
    if (dtype == DType::kFloat32) {
      std::vector<float> v;
      for (double x : t->Doubles()) v.push_back(static_cast<float>(x));
      return {Value::Of(HostTensor::OfFloats(v, t->dims))};
    }
  }
  const Symbol x = n.Input(0);
  const DType from = n.DTypeOf(x);
  if (from == dtype) return {Value::Of(x)};
  if (dtype == DType::kBool) {  // bools travel as uint8 0 and 1 (onnx_import.cc)
    if (from == DType::kUInt8) return {Value::Of(x)};
    n.Fail("expected a cast to BOOL of a bool value, found one of " + std::string(DTypeName(from)) +
           " computed at run time");
  }
  return {Value::Of(n.Op("Cast", {x}, {{"dtype", std::string(DTypeName(dtype))}}))};
}

// where(condition, x, y): weft's where takes the three in one dtype, so the condition becomes
// the values' (a known one a parameter, one computed at run time a Cast).
std::vector<Value> Where(NodeContext& n) {
  const Symbol x = n.Input(1), y = n.Input(2);
  if (const HostTensor* cond = n.Known(0)) {
    std::vector<float> mask;
    for (int64_t c : cond->Int64s()) mask.push_back(c != 0 ? 1.0f : 0.0f);
    const Symbol c = n.Parameter("condition", HostTensor::OfFloats(mask, cond->dims));
    return {Value::Of(n.Op("where", {c, x, y}))};
  }
  const DType dtype = n.DTypeOf(n.Known(1) ? y : x);
  const Symbol c = n.Op("Cast", {n.Input(0)}, {{"dtype", std::string(DTypeName(dtype))}});
  return {Value::Of(n.Op("where", {c, x, y}))};
}

std::vector<Value> ReduceMean(NodeContext& n) {
  const std::vector<int64_t> axes = n.Ints("axes", {});
  return {Value::Of(
      n.Op("mean", {n.Input(0)},
           {{"axis", Tuple(axes)}, {"keepdims", n.Int("keepdims", 1) ? "true" : "false"}}))};
}

// x ^ y for a known exponent weft has an op for: 1, 2, 0.5.
std::vector<Value> Pow(NodeContext& n) {
  const double y = n.Scalar(1, "the exponent");
  if (y == 1) return {Value::Of(n.Input(0))};
  if (y == 2) return {Value::Of(n.Op("square", {n.Input(0)}))};
  if (y == 0.5) return {Value::Of(n.Op("sqrt", {n.Input(0)}))};
  n.Fail("expected the exponent 0.5, 1 or 2, found " + Number(y));
}

std::vector<Value> LayerNormalization(NodeContext& n) {
  if (n.Int("axis", -1) != -1)
    n.Unsupported("axis", std::to_string(n.Int("axis", -1)),
                  "-1 (weft's LayerNorm normalizes one axis)");
  if (n.node().output_size() > 1)
    n.Fail("expected one output, found the mean and inverse deviation too");
  if (!n.HasInput(2)) n.Fail("expected a bias input B");
  return {Value::Of(n.Op("LayerNorm", {n.Input(0), n.Input(1), n.Input(2)},
                         {{"axis", "-1"}, {"eps", Number(n.Float("epsilon", 1e-5f))}}))};
}

// Range(start, limit, delta) on known numbers (a symbolic limit cannot be folded).
std::vector<Value> Range(NodeContext& n) {
  const HostTensor& start = n.RequireKnown(0, "the start");
  const double s = n.Scalar(0, "the start"), limit = n.Scalar(1, "the limit"),
               delta = n.Scalar(2, "the delta");
  if (delta == 0) n.Fail("expected a delta other than 0, found 0");
  const double steps = std::ceil((limit - s) / delta);
  if (!std::isfinite(steps)) {
    n.Fail("expected a finite start, limit and delta, found " + Number(s) + ", " + Number(limit) +
           " and " + Number(delta));
  }
  if (steps > static_cast<double>(kMaxFoldedElements))
    n.Fail(std::string("expected at most ") + kMaxFoldedText + " values, found " + Number(steps));
  const int64_t count = std::max<int64_t>(0, static_cast<int64_t>(steps));
  if (start.dtype == DType::kInt64 || start.dtype == DType::kInt32) {
    constexpr double kInt64Range = 9.2e18;  // below 2^63: converts without overflow
    if (std::abs(s) > kInt64Range || std::abs(delta) > kInt64Range)
      n.Fail("expected a start and delta within int64, found " + Number(s) + " and " +
             Number(delta));
    const int64_t first = static_cast<int64_t>(s), step = static_cast<int64_t>(delta);
    std::vector<int64_t> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      if (__builtin_mul_overflow(i, step, &v[i]) || __builtin_add_overflow(first, v[i], &v[i]))
        n.Fail("expected values within int64, found value " + std::to_string(i) + " past it");
    }
    return {Value::Of(HostTensor::OfInt64s(v, {count}))};
  }
  std::vector<float> v;
  for (int64_t i = 0; i < count; ++i) v.push_back(static_cast<float>(s + i * delta));
  return {Value::Of(HostTensor::OfFloats(v, {count}))};
}

// Trilu on a known tensor (a causal mask): the upper (or lower) triangle of its last two axes
// from diagonal k kept, the rest zero.
std::vector<Value> Trilu(NodeContext& n) {
  const HostTensor& x = n.RequireKnown(0, "the input");
  if (x.dims.size() < 2) n.Fail("expected an input of at least 2 axes");
  const int64_t k = n.HasInput(1) ? static_cast<int64_t>(n.Scalar(1, "k")) : 0;
  const bool upper = n.Int("upper", 1) != 0;
  const int64_t rows = x.dims[x.dims.size() - 2], cols = x.dims.back();
  const size_t width = DTypeSize(x.dtype);
  HostTensor out = x;
  for (int64_t i = 0; i < x.Size(); ++i) {
    const int64_t r = (i / cols) % rows, c = i % cols;
    if (upper ? c - r < k : c - r > k) std::fill_n(out.bytes.begin() + i * width, width, 0);
  }
  return {Value::Of(out)};
}

}  // namespace

void AddTensorConverters(ConverterTable& t) {
  t["Range"] = Range;
  t["Trilu"] = Trilu;
  t["Transpose"] = Transpose;
  t["Concat"] = Concat;
  t["Unsqueeze"] = Unsqueeze;
  t["Squeeze"] = Squeeze;
  t["Gather"] = Gather;
  t["Split"] = Split;
  t["Cast"] = Cast;
  t["Where"] = Where;
  t["ReduceMean"] = ReduceMean;
  t["Pow"] = Pow;
  t["LayerNormalization"] = LayerNormalization;
}

}  // namespace weft::onnx_import
