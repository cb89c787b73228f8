// The parameter structs of the tensor ops (reductions, shape ops, concat, slice, split, take,
// Cast), device neutral: the definitions (ops/tensor/*.cc) parse them, and the CPU and GPU computes
// read them through Attrs::Get<P>(), with the helpers below that turn them into what one call does.
//
// And the reductions, listed once: each row is an op's name, its kind and its description; the
// definitions (reduce.cc) and each device's compute (ops/cpu/reduce.cc, ops/gpu/reduce.cc) expand
// the list.
//
//   const std::vector<bool> reduced = ReducedAxes("sum", attrs.Get<ReduceParam>(), data.shape());
//   const SliceBox box = MakeSliceBox(attrs.Get<SliceParam>(), data.shape());
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"

// X(name, kind, description)
#define WEFT_REDUCE_OPS(X)   \
  X(sum, kSum, "the sum")    \
  X(mean, kMean, "the mean") \
  X(max, kMax, "the maximum (NaN if any value is NaN)")

namespace weft {

// ---- sum, mean, max and their backward ops ----

#define WEFT_REDUCE_KIND(name, kind, description) kind,
enum class ReduceKind : uint8_t { WEFT_REDUCE_OPS(WEFT_REDUCE_KIND) };
#undef WEFT_REDUCE_KIND

struct ReduceParam {
  std::vector<int64_t> axis;  // as given; empty: every axis
  bool keepdims;
};

// Which axes of `in` the reduction removes. Throws, naming `op`, for an axis out of range or
// given twice.
std::vector<bool> ReducedAxes(const std::string& op, const ReduceParam& p, const Shape& in);

// ---- reshape, expand_dims, transpose ----

struct ReshapeParam {
  std::vector<int64_t> shape;  // extents, 0 (copy the input's extent) or one -1 (infer)
};

// reshape_dims: each output extent a product of a number and extents of the op's inputs.
struct DimProduct {
  int64_t factor = 1;
  std::vector<std::pair<int, int>> extents;  // (input, axis): that input's extent on that axis
};
struct ReshapeDimsParam {
  std::vector<DimProduct> shape;
  int num_inputs = 1;  // data and the inputs the products name (read only for their shapes)
};

struct ExpandDimsParam {
  int axis;  // in [-ndim - 1, ndim]: where the new axis goes
};

struct TransposeParam {
  std::vector<int64_t> axes;  // a permutation, negative entries normalized; empty: reverse
};

// Output axis k is input axis perm[k], for an input of `ndim` axes.
std::vector<int64_t> TransposePermutation(const TransposeParam& p, int ndim);

// _strided_copy: y, read in row-major order, is the walk over the input's elements (counted in
// row-major order) that starts at `offset` and runs `walk[k]` positions `stride[k]` apart along
// axis k of the walk, outermost first; y has the shape `shape`, of as many elements. What a chain
// of reshapes, transposes and slices reads (passes/compose_moves.h).
struct StridedCopyParam {
  std::vector<int64_t> shape, walk, stride;
  int64_t offset;
};

// ---- concat, slice and their backward ops ----

struct ConcatParam {
  int num_args;
  int dim;  // as given: checked against the inputs' axes by shape inference
};

struct SliceParam {
  std::vector<int64_t> begin, end;  // as given: one entry each per sliced axis
  std::vector<int64_t> axes;        // the sliced axes (negative count from the end); empty: leading
};

// split: num_outputs equal parts along `axis`; squeeze_axis drops the axis (each part must then
// have extent 1 along it).
struct SplitParam {
  int num_outputs;
  int axis;
  bool squeeze_axis;
};

// The box of one slice call: where it starts in the input, and the output's shape.
struct SliceBox {
  std::array<int64_t, Shape::kMaxDims> begin{};
  Shape out;
};

// Throws, naming the axis and the indices, where `p` does not fit `in`.
SliceBox MakeSliceBox(const SliceParam& p, const Shape& in);

// ---- take ----

struct TakeParam {
  int axis;  // as given: checked against a's axes by shape inference
};

// One take call: a viewed as (outer, n, inner) around the axis, and k indices.
struct TakeLayout {
  int64_t outer = 1, n = 1, inner = 1, k = 0;
};

// Throws, naming `op` and the axis, where `p` does not fit `a`.
TakeLayout MakeTakeLayout(const TakeParam& p, const Shape& a, int64_t k, const char* op = "take");

// ---- write_at ----

// The axis along which write_at writes; a call's layout is take's: data viewed as (outer, n,
// inner) around the axis, value as (outer, k, inner).
using WriteAtParam = TakeParam;

// ---- Cast ----

struct CastParam {
  DType dtype;
};

}  // namespace weft
