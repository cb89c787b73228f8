// batch_dot and matmul: batched matrix products, numpy's matmul for operands of 2 to 4 axes.
//
//   a    (..., m, k), or (..., k, m) with transpose_a      (batch_dot only)
//   b    (..., k, n), or (..., n, k) with transpose_b      (batch_dot only)
//   out  (..., m, n)
//
// The batch axes (all but the last two) are aligned at their last axis and broadcast as numpy's
// matmul broadcasts them: each pair of extents equal or one of them 1 (or absent), the output
// takes the larger. (B, H, T, D) x (B, H, D, T) -> (B, H, T, T); (B, T, D) x (D, E) -> (B, T, E);
// (B, 1, T, D) x (H, D, E) -> (B, H, T, E). matmul is batch_dot without the transposes: two names
// over one shape rule (ops/nn/batch_gemm.h), one backward op, and the same computes.
//
// _backward_batch_dot takes (out_grad, a, b) and gives (d_a, d_b); the gradient of an operand
// broadcast along a batch axis is summed over it. With dz = out_grad:
//   d_a = dz op(b)^T (stored (k, m) with transpose_a: op(b) dz^T)
//   d_b = op(a)^T dz (stored (n, k) with transpose_b: dz^T op(a))
// Compute: ops/cpu/batch_dot.cc, ops/gpu/batch_dot.cc.
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/nn/batch_gemm.h"
#include "ops/op.h"

namespace weft {
namespace {

BatchDotParam ParseBatchDot(AttrReader& r) {
  return {r.Bool("transpose_a", false), r.Bool("transpose_b", false)};
}

BatchDotParam ParseMatmul(AttrReader&) { return {false, false}; }

std::vector<Shape> BatchDotShape(const std::string& op, const Attrs& a,
                                 const std::vector<Shape>& in) {
  return {BatchDotPlanOf(op.c_str(), a.Get<BatchDotParam>(), in[0], in[1]).out};
}

// in: (out_grad, a, b).
std::vector<Shape> BatchDotBackwardShape(const Attrs& a, const std::vector<Shape>& in) {
  const char* op = "_backward_batch_dot";
  const Shape out = BatchDotPlanOf(op, a.Get<BatchDotParam>(), in[1], in[2]).out;
  if (in[0] != out) WEFT_THROW(op << ": out_grad must be " << out << ", found " << in[0]);
  return {in[1], in[2]};
}

void BatchDotGradient(const Attrs& a, GradBuilder& g) {
  const GradEntry d =
      g.Op("_backward_batch_dot", {g.OutGrad(0), g.Input(0), g.Input(1)}, a.raw(), 2);
  g.SetInputGrad(0, g.NodeOutput(d, 0));
  g.SetInputGrad(1, g.NodeOutput(d, 1));
}

void DefineProduct(const std::string& name, const std::string& description,
                   BatchDotParam (*parse)(AttrReader&)) {
  RegisterOp(name)
      .Describe(description)
      .Params(parse)
      .Inputs({"a", "b"})
      .InferShape([name](const Attrs& a, const std::vector<Shape>& in) {
        return BatchDotShape(name, a, in);
      })
      .Gradient(BatchDotGradient);
}

const bool defined = [] {
  DefineProduct("batch_dot",
                "batched matrix product a * b of 2-D to 4-D arrays, batch axes broadcast as "
                "numpy's matmul; transpose_a, transpose_b read a's or b's matrices transposed",
                ParseBatchDot);
  DefineProduct("matmul",
                "numpy's matmul of 2-D to 4-D arrays: batched matrix product with broadcast batch "
                "axes (batch_dot without transposes)",
                ParseMatmul);
  RegisterOp("_backward_batch_dot")
      .Describe("gradient of batch_dot and matmul: (out_grad, a, b) -> (d_a, d_b)")
      .Params(ParseBatchDot)
      .Inputs({"out_grad", "a", "b"})
      .Outputs(2)
      .InferShape(BatchDotBackwardShape);
  return true;
}();

}  // namespace
}  // namespace weft
