// Embedding: looks up rows of a weight matrix by index, and its backward op.
//
// Inputs: data, indices of any shape stored as float32, float64, bfloat16, int32 or int64 (the
// fractional part is dropped), whatever weight's dtype, so a bfloat16 model takes float32 (or
// integer) token ids past bfloat16's 256 exact integers; and weight, (input_dim, output_dim),
// float32, float64, bfloat16 or float16, the output's dtype. Attributes input_dim and output_dim,
// both required, >= 1. The output is data.shape + (output_dim,): out[k, :] = weight[data[k], :]. An
// index outside [0, input_dim) is found while the op runs (each device's compute says what it does
// then).
//
// Gradient: only for weight. `_backward_Embedding` takes (out_grad, data) and gives d weight,
// whose row j is the sum of the out_grad rows whose index is j. data gets no gradient.
// Compute: ops/cpu/embedding.cc, ops/gpu/embedding.cc.
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "core/error.h"
#include "ops/internal/op_util.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

EmbeddingParam ParseEmbedding(AttrReader& r) {
  return {r.Int("input_dim", std::nullopt, 1), r.Int("output_dim", std::nullopt, 1)};
}

std::vector<Shape> EmbeddingShape(const Attrs& a, const std::vector<Shape>& in) {
  const EmbeddingParam& p = a.Get<EmbeddingParam>();
  const Shape weight{p.input_dim, p.output_dim};
  if (in[1] != weight) {
    WEFT_THROW("Embedding: expected weight of shape "
               << weight << " (input_dim, output_dim), found " << in[1]);
  }
  if (in[0].ndim() == Shape::kMaxDims) {
    WEFT_THROW("Embedding: expected data with fewer than " << Shape::kMaxDims << " axes, found "
                                                           << in[0]);
  }
  Shape out = in[0];
  out.PushBack(p.output_dim);
  return {out};
}

// The weight's shape follows from the attributes alone, so a graph need not be given it.
void EmbeddingInputShapes(const Attrs& a, std::vector<std::optional<Shape>>& in) {
  const EmbeddingParam& p = a.Get<EmbeddingParam>();
  if (!in[1]) in[1] = Shape{p.input_dim, p.output_dim};
}

// in: (out_grad, data).
std::vector<Shape> EmbeddingBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const EmbeddingParam& p = a.Get<EmbeddingParam>();
  Shape out = in[1];
  out.PushBack(p.output_dim);
  CheckSameShape(in[0], out, "the output gradient and the output");
  return {Shape{p.input_dim, p.output_dim}};
}

constexpr DType kWeightTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                  DType::kFloat16};

// Checks that `t` (what `name` of `op` is) is one of `allowed`.
void CheckType(const char* op, const char* name, DType t, std::span<const DType> allowed,
               const char* expected) {
  if (std::find(allowed.begin(), allowed.end(), t) == allowed.end())
    WEFT_THROW(op << ": expected " << name << " of " << expected << ", found " << t);
}

// in: (data, weight); out: weight's dtype.
std::vector<DType> EmbeddingTypes(const Attrs&, const std::vector<DType>& in) {
  CheckType("Embedding", "data", in[0], kEmbeddingIndexTypes,
            "float32, float64, bfloat16, float16, int32 or int64");
  CheckType("Embedding", "weight", in[1], kWeightTypes, "float32, float64, bfloat16 or float16");
  return {in[1]};
}

// in: (out_grad, data); out: d weight, out_grad's dtype.
std::vector<DType> EmbeddingBackwardTypes(const Attrs&, const std::vector<DType>& in) {
  CheckType("_backward_Embedding", "out_grad", in[0], kWeightTypes,
            "float32, float64, bfloat16 or float16");
  CheckType("_backward_Embedding", "data", in[1], kEmbeddingIndexTypes,
            "float32, float64, bfloat16, int32 or int64");
  return {in[0]};
}

const bool defined = [] {
  WEFT_REGISTER_OP(Embedding)
      .Describe(
          "rows of weight (input_dim, output_dim) picked by the indices in data; output data.shape "
          "+ "
          "(output_dim,)")
      .Params(ParseEmbedding)
      .Inputs({"data", "weight"})
      .InferShape(EmbeddingShape)
      .InferType(EmbeddingTypes)
      .InferInputShapes(EmbeddingInputShapes)
      .Gradient(GradientFromBackwardOp("Embedding", 1));  // data gets none
  WEFT_REGISTER_OP(_backward_Embedding)
      .Describe(
          "gradient of Embedding for weight: takes (out_grad, data), sums out_grad rows by index")
      .Params(ParseEmbedding)
      .Inputs({"out_grad", "data"})
      .InferShape(EmbeddingBackwardShape)
      .InferType(EmbeddingBackwardTypes);
  return true;
}();

}  // namespace
}  // namespace weft
