// The batched matrix products of batch_dot and matmul (ops/nn/batch_dot.cc), device neutral: the
// parameters, the shape rule with its broadcast batch axes, and each product a call computes
// (forward, and the gradient of either operand) as a BatchGemm that the CPU (oneDNN's matmul, or
// loops for float64) and the GPU (cuBLASLt, strided batched) run as they are told.
//
//   const BatchDotPlan plan = BatchDotPlanOf("batch_dot", p, a.shape(), b.shape());
//   const GemmSteps steps = StepsOf(plan.grad_b);   // b broadcast: a product, then its sum
//   Run(steps.product, x, y, scratch);
//   if (steps.sum) Run(*steps.sum, scratch, ones, z);
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "core/shape.h"

namespace weft {

struct BatchDotParam {
  bool transpose_a;  // a's matrices are stored (k, m): the product reads a^T
  bool transpose_b;  // b's matrices are stored (n, k)
};

// Batch axes a product has at most: operands have 2 to 4 axes.
inline constexpr int kBatchAxes = 2;

// One batched matrix product over the batch index i = (i0, i1), on row-major tensors:
//   z[i] (m, n) = op(x[i]) (m, k) * op(y[i]) (k, n)
// x[i] is stored (m, k), or (k, m) when trans_x; y[i] (k, n), or (n, k) when trans_y; z[i] (m, n).
// Each tensor's matrices are dense; its stride is the element offset of one step along a batch
// axis, 0 where the tensor is broadcast along it. For z, a 0 stride on an axis of extent > 1 means
// the products along it are summed into one matrix (the gradient of a broadcast operand).
struct BatchGemm {
  std::array<int64_t, kBatchAxes> batch = {1, 1};
  int64_t m = 1, n = 1, k = 1;
  bool trans_x = false, trans_y = false;
  std::array<int64_t, kBatchAxes> x_stride = {}, y_stride = {}, z_stride = {};

  int64_t Count() const { return batch[0] * batch[1]; }
  // Whether z sums over a batch axis (its stride is 0 where the extent is over 1).
  bool SumsZ() const;
};

// What one call of batch_dot (or matmul) on operands a and b computes.
struct BatchDotPlan {
  Shape out;          // the batch axes broadcast, then (m, n)
  BatchGemm forward;  // x = a, y = b, z = out
  // The gradients, with z = d_a and z = d_b. `*_inputs` say which inputs of _backward_batch_dot
  // (0: out_grad, 1: a, 2: b) are x and y.
  BatchGemm grad_a, grad_b;
  std::array<int, 2> grad_a_inputs, grad_b_inputs;
};

// Checks a and b (2 to 4 axes, none empty, equal inner extents, batch axes that broadcast as
// numpy's matmul does) and returns the call's products; errors name `op`.
BatchDotPlan BatchDotPlanOf(const char* op, const BatchDotParam& p, const Shape& a, const Shape& b);

// How a device runs a BatchGemm: `product` alone when z sums over no axis; else `product` into
// a scratch z of the full batch (scratch_size elements), then `sum`: that scratch times a vector
// of ones_size ones into z, a product too (one GEMM for the whole reduction).
struct GemmSteps {
  BatchGemm product;
  std::optional<BatchGemm> sum;
  int64_t scratch_size = 0, ones_size = 0;
};

GemmSteps StepsOf(const BatchGemm& g);

}  // namespace weft
