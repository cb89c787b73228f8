// Converters of shape arithmetic (onnx/dims.h): Shape, and the integer ops exporters compute
// reshape targets with (Gather, Slice, Concat, Unsqueeze, Squeeze, Cast, Add, Sub, Mul, Div, Mod,
// Equal, Where) on known or symbolic extents, computed here at import; and the ops that read such
// targets: Reshape, Expand, Slice and ConstantOfShape; and Squeeze of a value computed at run
// time, a reshape to symbolic extents, and Gather of one known position of such a value, a slice.
// The integer ops wrap the converters of the other families: a node whose inputs are not shape
// arithmetic goes on to them.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "weft/onnx/importer.h"
#include "weft/onnx/reader.h"

namespace weft::onnx_import {
namespace {

using Integers = std::optional<DimTensor>;

// The most copies Expand joins along one axis (and kMaxFoldedElements, importer.h, the most
// elements ConstantOfShape computes at import): a file cannot make the import allocate without
// bound.
constexpr int64_t kMaxCopies = 4096;

// ---- integer ops on extents ----

// An ONNX position on an axis of `size`: negative counts from the end, then clamped to [0, size]
// (Shape's start and end, Slice's starts and ends).
int64_t Clamped(int64_t i, int64_t size) {
  return std::clamp(i < 0 ? i + size : i, int64_t{0}, size);
}

// Value i of an operand that broadcasts (a single value stands for all).
const SymDim& At(const DimTensor& t, size_t i) { return t.values[t.values.size() == 1 ? 0 : i]; }

// Whether operands of these sizes broadcast (each the largest or 1).
bool Broadcast(std::initializer_list<size_t> sizes) {
  const size_t size = std::max(sizes);
  return std::all_of(sizes.begin(), sizes.end(), [size](size_t s) { return s == size || s == 1; });
}

// int64 arithmetic of known extents: nullopt where the result overflows (INT64_MIN / -1 too).
using KnownOp = std::function<std::optional<int64_t>(int64_t, int64_t)>;
template <bool (*op)(int64_t, int64_t, int64_t*)>
std::optional<int64_t> Checked(int64_t a, int64_t b) {
  int64_t r = 0;
  return op(a, b, &r) ? std::nullopt : std::optional<int64_t>(r);
}
bool AddOverflows(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool SubOverflows(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool MulOverflows(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }
bool DivOverflows(int64_t a, int64_t b, int64_t* r) {  // b != 0 (checked before)
  if (a == std::numeric_limits<int64_t>::min() && b == -1) return true;
  *r = a / b;  // truncating, as ONNX Runtime's integer Div
  return false;
}
// ONNX's integer Mod (b != 0): the remainder takes the divisor's sign (fmod 0), or the
// dividend's (fmod 1, C's %).
template <bool kFmod>
bool ModOverflows(int64_t a, int64_t b, int64_t* r) {
  *r = b == -1 ? 0 : a % b;
  if (!kFmod && *r != 0 && ((*r < 0) != (b < 0))) *r += b;
  return false;
}

// a op b on two rank <= 1 operands with numpy broadcasting: `known` on two numbers, `symbolic`
// where either is symbolic (nullopt: no product, an error); a division by a known zero and a
// result past int64 are errors, not values. Known operands that are not int64, or do not
// broadcast, are left to the converter of values computed at run time.
Integers Arithmetic(
    NodeContext& n, const KnownOp& known,
    const std::function<std::optional<SymDim>(const SymDim&, const SymDim&)>& symbolic,
    bool divides) {
  const Integers a = n.Integers(0), b = n.Integers(1);
  if (!a || !b) return std::nullopt;
  const bool all_known = a->IsKnown() && b->IsKnown();
  if (all_known && (n.Known(0)->dtype != DType::kInt64 || n.Known(1)->dtype != DType::kInt64))
    return std::nullopt;
  const size_t na = a->values.size(), nb = b->values.size();
  if (!Broadcast({na, nb})) {
    if (all_known) return std::nullopt;
    n.Fail("expected operands that broadcast");
  }
  const DimTensor& wider =
      na != nb ? (na > nb ? *a : *b) : (a->dims.size() >= b->dims.size() ? *a : *b);
  DimTensor out{wider.dims, {}, std::nullopt};
  for (size_t i = 0; i < std::max(na, nb); ++i) {
    const SymDim &x = At(*a, i), &y = At(*b, i);
    if (divides && y == SymDim::Of(0)) n.Fail("expected integer divisors other than 0, found 0");
    std::optional<SymDim> r;
    if (x.IsKnown() && y.IsKnown()) {
      const std::optional<int64_t> v = known(x.factor, y.factor);
      if (!v) {
        n.Fail("expected shape arithmetic within int64, found it past int64 on " + n.Text(x) +
               " and " + n.Text(y));
      }
      r = SymDim::Of(*v);
    } else {
      r = symbolic(x, y);
    }
    if (!r) {
      n.Fail("shape arithmetic on " + n.Text(x) + " and " + n.Text(y) +
             " that is no product of the graph's symbolic extents (weft follows products such as "
             "4*batch)");
    }
    out.values.push_back(*r);
  }
  return out;
}

std::function<Integers(NodeContext&)> ArithmeticOn(
    KnownOp known, std::function<std::optional<SymDim>(const SymDim&, const SymDim&)> symbolic,
    bool divides = false) {
  return [known, symbolic, divides](NodeContext& n) {
    return Arithmetic(n, known, symbolic, divides);
  };
}

Integers Shape(NodeContext& n) {
  std::vector<SymDim> dims;
  std::optional<Symbol> of;
  if (const HostTensor* t = n.Known(0)) {
    for (int64_t d : t->dims) dims.push_back(SymDim::Of(d));
  } else {
    of = n.Input(0);
    dims = n.ShapeOf(*of, "input 0");
  }
  const int64_t rank = static_cast<int64_t>(dims.size());
  const int64_t start = Clamped(n.Int("start", 0), rank), end = Clamped(n.Int("end", rank), rank);
  if (start != 0 || end != rank) of.reset();
  std::vector<SymDim> picked(dims.begin() + start, dims.begin() + std::max(start, end));
  return DimTensor{{static_cast<int64_t>(picked.size())}, picked, of};
}

Integers Gather(NodeContext& n) {
  const Integers data = n.Integers(0);
  const HostTensor* indices = n.Known(1);
  if (!data || indices == nullptr || data->dims.size() != 1 || n.Int("axis", 0) != 0)
    return std::nullopt;
  DimTensor out{indices->dims, {}, std::nullopt};
  const int64_t size = static_cast<int64_t>(data->values.size());
  for (int64_t i : indices->Int64s()) {
    const int64_t k = i < 0 ? i + size : i;
    if (k < 0 || k >= size)
      n.Fail("index " + std::to_string(i) + " is outside " + std::to_string(size) + " values");
    out.values.push_back(data->values[k]);
  }
  return out;
}

// Slice of a list of extents some of which are symbolic (PyTorch 2's exporter slices Shape(x) to
// pick extents): known starts and ends on axis 0, steps of 1, clamped as ONNX clamps them.
Integers SliceExtents(NodeContext& n) {
  const Integers data = n.Integers(0);
  const HostTensor *starts = n.Known(1), *ends = n.Known(2);
  if (!data || data->IsKnown() || data->dims.size() != 1 || starts == nullptr || ends == nullptr)
    return std::nullopt;
  if (starts->Size() != 1 || ends->Size() != 1)
    n.Fail("expected one start and one end on a list of extents, found " +
           std::to_string(starts->Size()) + " and " + std::to_string(ends->Size()));
  if (n.HasInput(3)) {
    const std::vector<int64_t> axes = n.RequireKnown(3, "the axes").Int64s();
    if (axes.size() != 1 || (axes[0] != 0 && axes[0] != -1))
      n.Fail("expected axis 0 of a list of extents, found " + Tuple(axes));
  }
  if (n.HasInput(4)) {
    const std::vector<int64_t> steps = n.RequireKnown(4, "the steps").Int64s();
    if (steps != std::vector<int64_t>{1})
      n.Fail("expected a step of 1 on a list of extents, found " + Tuple(steps));
  }
  const int64_t size = static_cast<int64_t>(data->values.size());
  const int64_t begin = Clamped(starts->Int64s()[0], size);
  const int64_t end = std::max(begin, Clamped(ends->Int64s()[0], size));
  DimTensor out{
      {end - begin}, {data->values.begin() + begin, data->values.begin() + end}, std::nullopt};
  if (begin == 0 && end == size) out.shape_of = data->shape_of;
  return out;
}

Integers Concat(NodeContext& n) {
  DimTensor out;
  for (int i = 0; i < n.node().input_size(); ++i) {
    const Integers part = n.Integers(i);
    if (!part) return std::nullopt;
    out.values.insert(out.values.end(), part->values.begin(), part->values.end());
  }
  out.dims = {static_cast<int64_t>(out.values.size())};
  return out;
}

// Unsqueeze of one extent into a list of one, Squeeze of a list of one into one extent.
Integers Unsqueeze(NodeContext& n) {
  Integers x = n.Integers(0);
  if (!x || x->IsKnown() || !x->dims.empty()) return std::nullopt;
  x->dims = {1};
  x->shape_of.reset();
  return x;
}

Integers Squeeze(NodeContext& n) {
  Integers x = n.Integers(0);
  if (!x || x->IsKnown() || x->dims != std::vector<int64_t>{1}) return std::nullopt;
  x->dims = {};
  x->shape_of.reset();
  return x;
}

Integers Cast(NodeContext& n) {
  Integers x = n.Integers(0);
  const int64_t to = n.Int("to", 1);
  if (!x || (to != onnx::TensorProto::INT64 && to != onnx::TensorProto::INT32)) return std::nullopt;
  return x;
}

// Equal on extents gives a known boolean tensor: numbers compared, a symbolic extent equal to
// itself and never to a negative number (the -1 exporters compare shapes with); anything else
// cannot be decided at import.
std::optional<HostTensor> Equal(NodeContext& n) {
  const Integers a = n.Integers(0), b = n.Integers(1);
  if (!a || !b) return std::nullopt;
  const size_t na = a->values.size(), nb = b->values.size();
  if (!Broadcast({na, nb})) n.Fail("expected operands that broadcast");
  HostTensor out{DType::kBool, na >= nb ? a->dims : b->dims, {}};
  for (size_t i = 0; i < std::max(na, nb); ++i) {
    const SymDim &x = At(*a, i), &y = At(*b, i);
    const auto negative_vs_extent = [](const SymDim& k, const SymDim& e) {
      return k.IsKnown() && k.factor < 0 && !e.IsKnown() && e.factor > 0;
    };
    if (!(x == y) && !(x.IsKnown() && y.IsKnown()) && !negative_vs_extent(x, y) &&
        !negative_vs_extent(y, x))
      n.Fail("cannot decide at import whether " + n.Text(x) + " equals " + n.Text(y));
    out.bytes.push_back(x == y ? 1 : 0);
  }
  return out;
}

// Where with a known condition choosing between extents.
Integers Where(NodeContext& n) {
  const HostTensor* cond = n.Known(0);
  const Integers a = n.Integers(1), b = n.Integers(2);
  if (cond == nullptr || !a || !b || cond->dims.size() > 1) return std::nullopt;
  const std::vector<int64_t> c = cond->Int64s();
  const size_t nc = c.size(), size = std::max({nc, a->values.size(), b->values.size()});
  if (!Broadcast({nc, a->values.size(), b->values.size()}))
    n.Fail("expected operands that broadcast");
  DimTensor out{{static_cast<int64_t>(size)}, {}, std::nullopt};
  for (size_t i = 0; i < size; ++i)
    out.values.push_back(c[nc == 1 ? 0 : i] != 0 ? At(*a, i) : At(*b, i));
  if (cond->dims.empty() && a->dims.empty() && b->dims.empty()) out.dims = {};
  return out;
}

// Wraps the converter of `op` already in the table: shape arithmetic first, then the other.
template <typename T>
void Fold(ConverterTable& t, const std::string& op,
          std::function<std::optional<T>(NodeContext&)> fold) {
  const Converter other = t.at(op);
  t[op] = [fold, other](NodeContext& n) {
    if (std::optional<T> v = fold(n)) return std::vector<Value>{Value::Of(*v)};
    return other(n);
  };
}

// ---- ops that read extents ----

// The weft op giving x the extents `out`: reshape where each extent is a number, the input's own
// at that axis (0) or one inferred (-1); reshape_dims naming the inputs that carry the symbolic
// extents otherwise.
Symbol ReshapeTo(NodeContext& n, const Symbol& x, const std::vector<SymDim>& in,
                 const std::vector<SymDim>& out) {
  std::vector<int64_t> codes;
  bool inferred = false, plain = true;
  for (size_t i = 0; i < out.size() && plain; ++i) {
    if (out[i].IsKnown()) {
      plain = out[i].factor > 0;  // reshape's 0 copies an extent
      codes.push_back(out[i].factor);
    } else if (i < in.size() && in[i] == out[i]) {
      codes.push_back(0);
    } else {
      plain = !inferred;
      inferred = true;
      codes.push_back(-1);
    }
  }
  if (plain) return n.Op("reshape", {x}, {{"shape", Tuple(codes)}});
  std::vector<Symbol> inputs = {x};
  std::vector<std::string> sources = {""};  // the graph inputs read, by name
  std::string shape = "(";
  for (size_t i = 0; i < out.size(); ++i) {
    std::string entry = std::to_string(out[i].factor);
    for (const auto& [var, power] : out[i].powers) {
      const NodeContext::VarSource source = n.SourceOf(var);
      size_t k = std::find(sources.begin(), sources.end(), source.input) - sources.begin();
      if (k == sources.size()) {
        sources.push_back(source.input);
        inputs.push_back(source.symbol);
      }
      for (int p = 0; p < power; ++p)
        entry += "*in" + std::to_string(k) + "[" + std::to_string(source.axis) + "]";
    }
    shape += (i ? ", " : "") + entry;
  }
  shape += out.size() == 1 ? ",)" : ")";
  return n.Op("reshape_dims", inputs, {{"shape", shape}});
}

// The product of extents, or nullopt.
std::optional<SymDim> Product(const std::vector<SymDim>& dims) {
  std::optional<SymDim> p = SymDim::Of(1);
  for (const SymDim& d : dims)
    if (p) p = Multiply(*p, d);
  return p;
}

// ONNX Reshape's target resolved: 0 copies the input's extent (allowzero 0), one -1 inferred.
std::vector<SymDim> Resolve(NodeContext& n, const std::vector<SymDim>& in,
                            const DimTensor& target) {
  std::vector<SymDim> out = target.values;
  int infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].IsKnown() || out[i].factor > 0) continue;
    if (out[i].factor == 0) {
      if (i >= in.size())
        n.Fail("the shape copies (0) extent " + std::to_string(i) + " of " +
               std::to_string(in.size()));
      out[i] = in[i];
    } else if (out[i].factor == -1 && infer < 0) {
      infer = static_cast<int>(i);
    } else {
      n.Fail("expected extents >= -1 with at most one -1 in the shape");
    }
  }
  if (infer >= 0) {
    std::vector<SymDim> rest = out;
    rest.erase(rest.begin() + infer);
    const std::optional<SymDim> total = Product(in), known = Product(rest);
    std::optional<SymDim> inferred = total && known ? Divide(*total, *known) : std::nullopt;
    if (!inferred) n.Fail("cannot infer the -1 of the shape from symbolic extents");
    out[infer] = *inferred;
  }
  return out;
}

// Reshape to a symbolic target (a known one is convert_nn's).
std::optional<Symbol> ReshapeSymbolic(NodeContext& n) {
  const Integers target = n.Integers(1);
  if (!target || target->IsKnown()) return std::nullopt;
  if (n.Int("allowzero", 0) != 0) n.Unsupported("allowzero", "1", "0");
  const Symbol x = n.Input(0);
  const std::vector<SymDim> in = n.ShapeOf(x, "the reshaped input");
  return ReshapeTo(n, x, in, Resolve(n, in, *target));
}

// Expand: x broadcast against the target (ONNX's is numpy's, both ways). A new leading axis is a
// reshape; an axis of extent 1 grown to k is k copies joined (every dtype, no arithmetic).
std::vector<Value> Expand(NodeContext& n) {
  const Integers target = n.Integers(1);
  if (!target) n.RequireKnown(1, "the shape");
  Symbol x = n.Input(0);
  const std::vector<SymDim> given = n.ShapeOf(x, "the expanded input");
  std::vector<SymDim> in = given;
  const size_t rank = std::max(in.size(), target->values.size());
  if (rank > in.size()) {  // new leading axes of extent 1
    in.insert(in.begin(), rank - in.size(), SymDim::Of(1));
    x = ReshapeTo(n, x, given, in);
  }
  const size_t offset = rank - target->values.size();
  for (size_t a = offset; a < rank; ++a) {
    const SymDim& t = target->values[a - offset];
    if (t == SymDim::Of(1) || t == in[a]) continue;
    if (!(in[a] == SymDim::Of(1)) || !t.IsKnown() || t.factor < 1 || t.factor > kMaxCopies) {
      n.Fail("cannot expand extent " + n.Text(in[a]) + " of axis " + std::to_string(a) + " to " +
             n.Text(t) + " (expected 1, equal extents, or a known extent from 2 to " +
             std::to_string(kMaxCopies) + " grown from 1)");
    }
    std::vector<Symbol> copies(t.factor, x);
    x = n.Op("concat", copies,
             {{"num_args", std::to_string(t.factor)}, {"dim", std::to_string(a)}});
    in[a] = t;
  }
  return {Value::Of(x)};
}

// Slice with steps of 1: ends past the extent (INT64_MAX: "to the end") are clamped; on a
// symbolic extent a slice must be whole or start and end at known positions below it.
std::vector<Value> Slice(NodeContext& n) {
  const Integers starts = n.Integers(1), ends = n.Integers(2);
  if (!starts || !ends) n.RequireKnown(starts ? 2 : 1, starts ? "the ends" : "the starts");
  const Symbol x = n.Input(0);
  const std::vector<SymDim> in = n.ShapeOf(x, "the sliced input");
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes;
  if (n.HasInput(3)) {
    axes = n.RequireKnown(3, "the axes").Int64s();
  } else {
    for (size_t i = 0; i < starts->values.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (n.HasInput(4)) {
    for (int64_t s : n.RequireKnown(4, "the steps").Int64s())
      if (s != 1) n.Fail("expected steps of 1, found " + std::to_string(s));
  }
  if (axes.size() != starts->values.size() || axes.size() != ends->values.size())
    n.Fail("expected one start and one end per axis");
  std::vector<int64_t> begin, end, sliced;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + rank : axes[k];
    if (a < 0 || a >= rank) n.Fail("axis " + std::to_string(axes[k]) + " is out of range");
    const SymDim &d = in[a], &s = starts->values[k], &e = ends->values[k];
    if (s == SymDim::Of(0) && (e == d || (e.IsKnown() && e.factor >= (int64_t{1} << 62))))
      continue;  // the whole axis
    if (!d.IsKnown() || !s.IsKnown() || !e.IsKnown()) {
      n.Fail("slice [" + n.Text(s) + ", " + n.Text(e) + ") of axis " + std::to_string(a) +
             " of extent " + n.Text(d) +
             ": expected known positions on a known extent, or the "
             "whole axis");
    }
    begin.push_back(Clamped(s.factor, d.factor));
    end.push_back(std::max(begin.back(), Clamped(e.factor, d.factor)));
    sliced.push_back(a);
  }
  if (sliced.empty()) return {Value::Of(x)};
  return {Value::Of(
      n.Op("slice", {x}, {{"begin", Tuple(begin)}, {"end", Tuple(end)}, {"axes", Tuple(sliced)}}))};
}

// Squeeze of a value computed at run time (PyTorch 2 exports multi-head attention's packed
// projection with one): a reshape to its shape less the named axes, each of extent 1, or less
// every axis of extent 1. Known tensors and lists of extents are the other converters'.
std::optional<Symbol> SqueezeValue(NodeContext& n) {
  if (n.Known(0) != nullptr || n.Integers(0)) return std::nullopt;
  const Symbol x = n.Input(0);
  const std::vector<SymDim> in = n.ShapeOf(x, "the squeezed input");
  const int64_t rank = static_cast<int64_t>(in.size());
  std::vector<int64_t> axes = AxesOf(n, 1, 13);
  for (int64_t& a : axes) a = Normalized(n, a, rank);
  for (const SymDim& d : in) {
    if (axes.empty() && !d.IsKnown())  // a batch of 1 would lose its axis, others not
      n.Fail("expected the axes to squeeze: the input's extents " + n.Text(d) + " are symbolic");
  }
  std::vector<SymDim> out;
  for (int64_t a = 0; a < rank; ++a) {
    const bool named = std::find(axes.begin(), axes.end(), a) != axes.end();
    if (named && !(in[a] == SymDim::Of(1)))
      n.Fail("expected extent 1 on the squeezed axis " + std::to_string(a) + ", found " +
             n.Text(in[a]));
    if (!(named || (axes.empty() && in[a] == SymDim::Of(1)))) out.push_back(in[a]);
  }
  return ReshapeTo(n, x, in, out);
}

// Gather of one known position on a known extent of a value computed at run time (PyTorch 2
// exports the packed projection's q, k and v so): a slice of that position, its axis dropped for
// a scalar index. Moves, where take is a gather: passes/compose_moves.h reads a chain of them as
// one copy.
std::optional<Symbol> GatherOne(NodeContext& n) {
  const HostTensor* index = n.Known(1);
  if (n.Known(0) != nullptr || n.Integers(0) || index == nullptr || index->dims.size() > 1)
    return std::nullopt;
  const std::vector<int64_t> at = index->Int64s();
  const Symbol x = n.Input(0);
  const std::vector<SymDim> in = n.ShapeOf(x, "the gathered input");
  const int64_t a = Normalized(n, n.Int("axis", 0), static_cast<int64_t>(in.size()));
  if (at.size() != 1 || !in[a].IsKnown()) return std::nullopt;
  const int64_t extent = in[a].factor, i = at[0] < 0 ? at[0] + extent : at[0];
  if (i < 0 || i >= extent) {
    n.Fail("index " + std::to_string(at[0]) + " is out of range for axis " + std::to_string(a) +
           " of extent " + std::to_string(extent));
  }
  const Symbol one =
      n.Op("slice", {x}, {{"begin", Tuple({i})}, {"end", Tuple({i + 1})}, {"axes", Tuple({a})}});
  if (index->dims.size() == 1) return one;
  std::vector<SymDim> kept = in, out = in;
  kept[a] = SymDim::Of(1);
  out.erase(out.begin() + a);
  return ReshapeTo(n, one, kept, out);
}

// ConstantOfShape: a known shape gives a known tensor; Shape(x)'s gives one like x, filled.
std::vector<Value> ConstantOfShape(NodeContext& n) {
  const Integers shape = n.Integers(0);
  if (!shape) n.RequireKnown(0, "the shape");
  HostTensor value = HostTensor::OfFloats({0.0f}, {1});
  if (const onnx::TensorProto* t = n.TensorAttr("value")) value = TensorOf(*t, "");
  if (value.Size() != 1) n.Fail("expected a value of one element");
  const size_t width = value.bytes.size();
  if (shape->IsKnown()) {
    HostTensor out{value.dtype, shape->ToHost().Int64s(), {}};
    for (int64_t d : out.dims)
      if (d < 0) n.Fail("expected extents >= 0, found " + Tuple(out.dims));
    if (out.Size() > kMaxFoldedElements) {
      n.Fail(std::string("expected at most ") + kMaxFoldedText +
             " elements in a tensor computed at import, found " + Tuple(out.dims));
    }
    out.bytes.resize(static_cast<size_t>(out.Size()) * width);
    for (size_t at = 0; at < out.bytes.size(); at += width)
      std::memcpy(out.bytes.data() + at, value.bytes.data(), width);
    return {Value::Of(out)};
  }
  if (!shape->shape_of) {
    n.Fail(
        "expected a known shape or the shape of one value (Shape(x)), found symbolic extents "
        "computed otherwise");
  }
  const double v = value.Doubles()[0];
  Symbol like = *shape->shape_of;
  if (n.DTypeOf(like) != value.dtype)
    like = n.Op("Cast", {like}, {{"dtype", std::string(DTypeName(value.dtype))}});
  if (v == 0) return {Value::Of(n.Op("zeros_like", {like}))};
  const Symbol ones = n.Op("ones_like", {like});
  return {Value::Of(v == 1 ? ones : n.Op("mul_scalar", {ones}, {{"scalar", Number(v)}}))};
}

}  // namespace

void AddShapeConverters(ConverterTable& t) {
  t["Shape"] = [](NodeContext& n) { return std::vector<Value>{Value::Of(*Shape(n))}; };
  using Fn = std::function<Integers(NodeContext&)>;
  Fold<Symbol>(t, "Gather", std::function<std::optional<Symbol>(NodeContext&)>(GatherOne));
  Fold<DimTensor>(t, "Gather", Fn(Gather));
  Fold<DimTensor>(t, "Concat", Fn(Concat));
  Fold<DimTensor>(t, "Unsqueeze", Fn(Unsqueeze));
  Fold<Symbol>(t, "Squeeze", std::function<std::optional<Symbol>(NodeContext&)>(SqueezeValue));
  Fold<DimTensor>(t, "Squeeze", Fn(Squeeze));
  Fold<DimTensor>(t, "Cast", Fn(Cast));
  Fold<DimTensor>(t, "Where", Fn(Where));
  Fold<Symbol>(t, "Reshape", std::function<std::optional<Symbol>(NodeContext&)>(ReshapeSymbolic));
  Fold<DimTensor>(t, "Add",
                  Fn(ArithmeticOn(Checked<AddOverflows>, [](const SymDim& a, const SymDim& b) {
                    return AddLike(a, b, 1);
                  })));
  Fold<DimTensor>(t, "Sub",
                  Fn(ArithmeticOn(Checked<SubOverflows>, [](const SymDim& a, const SymDim& b) {
                    return AddLike(a, b, -1);
                  })));
  Fold<DimTensor>(t, "Mul", Fn(ArithmeticOn(Checked<MulOverflows>, Multiply)));
  Fold<DimTensor>(t, "Div", Fn(ArithmeticOn(Checked<DivOverflows>, Divide, /*divides=*/true)));
  t["Mod"] = [](NodeContext& n) -> std::vector<Value> {
    n.Fail(
        "expected integers known at import (shape arithmetic), found a value computed at run "
        "time");
  };
  Fold<DimTensor>(t, "Mod", Fn([](NodeContext& n) {
                    const KnownOp known = n.Int("fmod", 0) != 0 ? Checked<ModOverflows<true>>
                                                                : Checked<ModOverflows<false>>;
                    return Arithmetic(n, known, Remainder, /*divides=*/true);
                  }));
  t["Equal"] = [](NodeContext& n) {
    std::optional<HostTensor> eq = Equal(n);
    if (!eq)
      n.Fail(
          "expected integers known at import (shape arithmetic), found a value "
          "computed at run time");
    return std::vector<Value>{Value::Of(*eq)};
  };
  t["Expand"] = Expand;
  t["Slice"] = Slice;
  Fold<DimTensor>(t, "Slice", Fn(SliceExtents));
  t["ConstantOfShape"] = ConstantOfShape;
}

}  // namespace weft::onnx_import
