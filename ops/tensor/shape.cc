// Shape ops: reshape, reshape_dims, expand_dims, flatten and reshape_like, which change only the
// shape, transpose, which permutes the axes, and _strided_copy, which reads any strided view of
// its input (what passes/compose_moves.h makes of a chain of them and slices).
//
// The first five copy their input unchanged in row-major order. They declare .Inplace({{0, 0}})
// so that a memory planner may alias output and input (the copy is then a no-op), and they
// request no resource on any device: CSE must treat them the same way whatever library
// implements them (DESIGN.md, CSE). Their gradient is reshape_like(out_grad, data), exact;
// transpose's is transpose by the inverse permutation. Compute: ops/cpu/shape.cc,
// ops/gpu/shape.cc (every dtype).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"

namespace weft {
namespace {

// The gradient of every pure reshape: out_grad, seen with data's shape.
void ReshapeLikeGradient(const Attrs&, GradBuilder& g) {
  g.SetInputGrad(0, g.Op("reshape_like", {g.OutGrad(0), g.Input(0)}));
}

// Defines a pure reshape whose output shape `infer` gives.
Op& DefineReshapeOp(const std::string& name, const std::string& description, ShapeFn infer) {
  return RegisterOp(name)
      .Describe(description)
      .InferShape(std::move(infer))
      .Inplace({{0, 0}})
      .Pointwise(PointwiseKind::kReshape)
      .Gradient(ReshapeLikeGradient);
}

// ---- reshape ----

ReshapeParam ParseReshape(AttrReader& r) {
  ReshapeParam p{r.IntList("shape", std::nullopt)};
  int inferred = 0;
  for (int64_t d : p.shape) {
    if (d < -1) {
      WEFT_THROW("op 'reshape': attribute 'shape': expected extents >= 0 or -1, found "
                 << FormatTuple(p.shape));
    }
    inferred += d == -1;
  }
  if (inferred > 1) {
    WEFT_THROW("op 'reshape': attribute 'shape': expected at most one -1, found "
               << FormatTuple(p.shape));
  }
  if (p.shape.size() > Shape::kMaxDims) {
    WEFT_THROW("op 'reshape': attribute 'shape': expected at most "
               << Shape::kMaxDims << " axes, found " << FormatTuple(p.shape));
  }
  return p;
}

Shape ReshapedShape(const std::vector<int64_t>& target, const Shape& in) {
  auto fail = [&] {
    WEFT_THROW("reshape: cannot reshape " << in << " (" << in.Size() << " elements) into "
                                          << FormatTuple(target));
  };
  Shape out;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(target.size()); ++i) {
    int64_t d = target[i];
    if (d == 0 && i >= in.ndim()) fail();  // 0 copies an axis the input does not have
    if (d == 0) d = in[i];
    if (d == -1) {
      infer = i;
      d = 1;
    } else if (__builtin_mul_overflow(known, d, &known)) {
      fail();
    }
    out.PushBack(d);
  }
  if (infer >= 0) {
    if (known == 0 || in.Size() % known != 0) fail();
    out[infer] = in.Size() / known;
  }
  if (out.Size() != in.Size()) fail();
  return out;
}

// ---- reshape_dims ----

// One factor of "4*in1[0]": a number, or inK[A] (input K's extent on axis A).
void ParseDimFactor(const std::string& text, DimProduct& product, int& num_inputs) {
  int input = 0, axis = 0, used = 0;
  if (std::sscanf(text.c_str(), " in%d [ %d ] %n", &input, &axis, &used) == 2 &&
      used == static_cast<int>(text.size()) && input >= 0 && axis >= 0) {
    product.extents.emplace_back(input, axis);
    num_inputs = std::max(num_inputs, input + 1);
    return;
  }
  long long factor = 0;
  if (std::sscanf(text.c_str(), " %lld %n", &factor, &used) == 1 &&
      used == static_cast<int>(text.size()) && factor >= 0 &&
      !__builtin_mul_overflow(product.factor, factor, &product.factor)) {
    return;
  }
  WEFT_THROW(
      "op 'reshape_dims': attribute 'shape': expected factors that are numbers >= 0 or "
      "inK[A] (input K's extent on axis A), found '"
      << text << "'");
}

ReshapeDimsParam ParseReshapeDims(AttrReader& r) {
  std::string text = r.String("shape", std::nullopt);
  const size_t open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) {
    WEFT_THROW(
        "op 'reshape_dims': attribute 'shape': expected a tuple such as (4*in1[0], 16), "
        "found '"
        << text << "'");
  }
  ReshapeDimsParam p;
  std::stringstream entries(text.substr(open + 1, close - open - 1));
  for (std::string entry; std::getline(entries, entry, ',');) {
    if (entry.find_first_not_of(' ') == std::string::npos) continue;  // "(3,)"
    DimProduct product;
    std::stringstream factors(entry);
    for (std::string f; std::getline(factors, f, '*');) ParseDimFactor(f, product, p.num_inputs);
    p.shape.push_back(product);
  }
  if (p.shape.size() > Shape::kMaxDims) {
    WEFT_THROW("op 'reshape_dims': attribute 'shape': expected at most "
               << Shape::kMaxDims << " axes, found " << p.shape.size());
  }
  return p;
}

std::vector<Shape> ReshapeDimsShape(const Attrs& a, const std::vector<Shape>& in) {
  Shape out;
  for (const DimProduct& d : a.Get<ReshapeDimsParam>().shape) {
    int64_t extent = d.factor;
    for (const auto& [input, axis] : d.extents) {
      if (axis >= in[input].ndim()) {
        WEFT_THROW("reshape_dims: shape names axis " << axis << " of input " << input
                                                     << ", whose shape is " << in[input]);
      }
      if (__builtin_mul_overflow(extent, in[input][axis], &extent)) {
        WEFT_THROW("reshape_dims: expected extents within int64, found "
                   << d.factor << " times axes of " << in[input] << " past int64");
      }
    }
    out.PushBack(extent);
  }
  if (out.Size() != in[0].Size()) {
    WEFT_THROW("reshape_dims: cannot reshape " << in[0] << " (" << in[0].Size()
                                               << " elements) into " << out);
  }
  return {out};
}

// ---- expand_dims ----

ExpandDimsParam ParseExpandDims(AttrReader& r) { return {r.Int("axis", std::nullopt)}; }

std::vector<Shape> ExpandDimsShape(const Attrs& a, const std::vector<Shape>& in) {
  if (in[0].ndim() == Shape::kMaxDims) {
    WEFT_THROW("expand_dims: expected an input with fewer than " << Shape::kMaxDims
                                                                 << " axes, found " << in[0]);
  }
  const int axis =
      NormalizeAxis("expand_dims", a.Get<ExpandDimsParam>().axis, in[0].ndim() + 1, in[0]);
  Shape out;
  for (int i = 0; i <= in[0].ndim(); ++i) {
    if (i == axis) out.PushBack(1);
    if (i < in[0].ndim()) out.PushBack(in[0][i]);
  }
  return {out};
}

// ---- flatten ----

// (N, d1, d2, ...) -> (N, d1 * d2 * ...); (N,) -> (N, 1).
std::vector<Shape> FlattenShape(const Attrs&, const std::vector<Shape>& in) {
  if (in[0].ndim() == 0)
    WEFT_THROW("flatten: expected an input with at least 1 axis, found " << in[0]);
  return {Shape{in[0][0], Shape(in[0].dims().subspan(1)).Size()}};  // Size checks for overflow
}

// ---- reshape_like ----

std::vector<Shape> ReshapeLikeShape(const Attrs&, const std::vector<Shape>& in) {
  if (in[0].Size() != in[1].Size()) {
    WEFT_THROW("reshape_like: cannot reshape " << in[0] << " (" << in[0].Size()
                                               << " elements) like " << in[1] << " ("
                                               << in[1].Size() << " elements)");
  }
  return {in[1]};
}

// ---- transpose ----

TransposeParam ParseTranspose(AttrReader& r) {
  const std::vector<int64_t> given = r.IntList("axes", std::vector<int64_t>{});
  TransposeParam p{given};
  const int64_t n = static_cast<int64_t>(p.axes.size());
  std::vector<bool> seen(p.axes.size(), false);
  for (int64_t& a : p.axes) {
    if (a < -n || a >= n || seen[a < 0 ? a + n : a]) {
      WEFT_THROW("op 'transpose': attribute 'axes': expected a permutation of 0.."
                 << n - 1 << " (negative counts from the end), found " << FormatTuple(given));
    }
    if (a < 0) a += n;
    seen[a] = true;
  }
  return p;
}

std::vector<Shape> TransposeShape(const Attrs& a, const std::vector<Shape>& in) {
  const TransposeParam& p = a.Get<TransposeParam>();
  if (!p.axes.empty() && static_cast<int>(p.axes.size()) != in[0].ndim()) {
    WEFT_THROW("transpose: expected one entry of axes per axis of the input "
               << in[0] << ", found axes=" << FormatTuple(p.axes));
  }
  Shape out;
  for (int64_t a : TransposePermutation(p, in[0].ndim())) out.PushBack(in[0][static_cast<int>(a)]);
  return {out};
}

void TransposeGradient(const Attrs& a, GradBuilder& g) {
  const TransposeParam& p = a.Get<TransposeParam>();
  AttrMap attrs;  // the inverse permutation; reversing is its own inverse
  if (!p.axes.empty()) {
    std::vector<int64_t> inverse(p.axes.size());
    for (size_t k = 0; k < p.axes.size(); ++k) inverse[p.axes[k]] = static_cast<int64_t>(k);
    attrs["axes"] = FormatTuple(inverse);
  }
  g.SetInputGrad(0, g.Op("transpose", {g.OutGrad(0)}, attrs));
}

// ---- _strided_copy ----

StridedCopyParam ParseStridedCopy(AttrReader& r) {
  StridedCopyParam p{r.IntList("shape", std::nullopt), r.IntList("walk", std::nullopt),
                     r.IntList("stride", std::nullopt),
                     r.Int64("offset", 0, 0, std::numeric_limits<int64_t>::max())};
  const auto negative = [](const std::vector<int64_t>& v) {
    return std::ranges::any_of(v, [](int64_t x) { return x < 0; });
  };
  if (p.walk.size() != p.stride.size() || p.walk.size() > Shape::kMaxDims ||
      p.shape.size() > Shape::kMaxDims || negative(p.shape) || negative(p.walk) ||
      negative(p.stride)) {
    WEFT_THROW("op '_strided_copy': expected a shape and a walk of at most "
               << Shape::kMaxDims << " extents >= 0, one stride >= 0 per extent of the walk, found "
               << "shape=" << FormatTuple(p.shape) << " walk=" << FormatTuple(p.walk)
               << " stride=" << FormatTuple(p.stride));
  }
  return p;
}

// Checks that the walk has the output's size and reads only elements of the input.
std::vector<Shape> StridedCopyShape(const Attrs& a, const std::vector<Shape>& in) {
  const StridedCopyParam& p = a.Get<StridedCopyParam>();
  const Shape out(p.shape), walk(p.walk);  // ParseStridedCopy checked their extents
  if (walk.Size() != out.Size()) {
    WEFT_THROW("_strided_copy: expected a walk of as many elements as shape="
               << out << " (" << out.Size() << "), found walk=" << walk);
  }
  int64_t last = p.offset;  // the largest element offset read
  bool overflow = false;
  for (size_t k = 0; k < p.walk.size() && out.Size() > 0; ++k) {
    int64_t reach = 0;
    overflow |= __builtin_mul_overflow(p.walk[k] - 1, p.stride[k], &reach) ||
                __builtin_add_overflow(last, reach, &last);
  }
  if (out.Size() > 0 && (overflow || last >= in[0].Size())) {
    WEFT_THROW("_strided_copy: walk=" << walk << " stride=" << FormatTuple(p.stride)
                                      << " offset=" << p.offset << " reads past the input " << in[0]
                                      << " (" << in[0].Size() << " elements)");
  }
  return {out};
}

const bool defined = [] {
  DefineReshapeOp("reshape",
                  "the input with another shape of the same size; in `shape`, 0 copies the input's "
                  "extent at that "
                  "position and one -1 is inferred from the rest",
                  [](const Attrs& a, const std::vector<Shape>& in) {
                    return std::vector<Shape>{ReshapedShape(a.Get<ReshapeParam>().shape, in[0])};
                  })
      .Params(ParseReshape)
      .Inputs({"data"});
  DefineReshapeOp("reshape_dims",
                  "the input with the shape `shape`, whose extents are products of numbers and "
                  "extents of the op's inputs, read only for their shapes: inK[A] is input K's "
                  "extent on axis A, as in shape=(4*in1[0], 1, in2[1]) (what a graph imported "
                  "with symbolic extents reshapes by)",
                  ReshapeDimsShape)
      .Params(ParseReshapeDims)
      .VariadicInputs([](const Attrs& a) { return a.Get<ReshapeDimsParam>().num_inputs; })
      .InferType(
          [](const Attrs&, const std::vector<DType>& in) { return std::vector<DType>{in[0]}; });
  DefineReshapeOp("expand_dims",
                  "the input with a new axis of extent 1 at `axis` (in [-ndim - 1, ndim])",
                  ExpandDimsShape)
      .Params(ParseExpandDims)
      .Inputs({"data"});
  DefineReshapeOp("flatten", "(N, d1, d2, ...) -> (N, d1 * d2 * ...)", FlattenShape)
      .Inputs({"data"});
  // Gradient for lhs only: the output does not depend on rhs's values.
  DefineReshapeOp("reshape_like",
                  "lhs with the shape of rhs (same size); rhs is read only for its shape",
                  ReshapeLikeShape)
      .Inputs({"lhs", "rhs"})
      .InferType(
          [](const Attrs&, const std::vector<DType>& in) { return std::vector<DType>{in[0]}; });
  WEFT_REGISTER_OP(transpose)
      .Describe(
          "the input with its axes permuted: output axis k is input axis axes[k] (default: "
          "reversed)")
      .Params(ParseTranspose)
      .Inputs({"data"})
      .InferShape(TransposeShape)
      .Gradient(TransposeGradient);
  WEFT_REGISTER_OP(_strided_copy)
      .Describe(
          "the input's elements (counted in row-major order) from `offset` along the walk of "
          "extents `walk` and element strides `stride`, outermost first, copied into an output "
          "of shape `shape` in row-major order: a chain of reshapes, transposes and slices in "
          "one pass over the data (inference only: no gradient)")
      .Params(ParseStridedCopy)
      .Inputs({"data"})
      .InferShape(StridedCopyShape);
  return true;
}();

}  // namespace
}  // namespace weft
