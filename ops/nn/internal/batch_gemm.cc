#include "ops/nn/batch_gemm.h"

#include <algorithm>

#include "core/error.h"

namespace weft {

namespace {

// An operand's batch axes aligned right with the product's two, and its matrix extents.
struct Operand {
  std::array<int64_t, kBatchAxes> batch = {1, 1};
  std::array<int64_t, kBatchAxes> stride = {};  // 0 where batch is 1
  int64_t rows, cols;                           // as stored
};

Operand OperandOf(const char* op, const char* name, const Shape& s) {
  if (s.ndim() < 2 || s.ndim() > 2 + kBatchAxes) {
    WEFT_THROW(op << ": " << name << " must have 2 to 4 axes, found " << s);
  }
  if (s.Size() == 0) WEFT_THROW(op << ": " << name << " must be non-empty, found " << s);
  Operand o{.rows = s[s.ndim() - 2], .cols = s[s.ndim() - 1]};
  int64_t step = o.rows * o.cols;
  for (int j = kBatchAxes - 1, axis = s.ndim() - 3; axis >= 0; --j, --axis) {
    o.batch[j] = s[axis];
    o.stride[j] = s[axis] == 1 ? 0 : step;
    step *= s[axis];
  }
  return o;
}

// The dense strides of a full batch of (rows, cols) matrices (0 where the extent is 1).
std::array<int64_t, kBatchAxes> DenseStrides(const std::array<int64_t, kBatchAxes>& batch,
                                             int64_t matrix) {
  return {batch[0] == 1 ? 0 : batch[1] * matrix, batch[1] == 1 ? 0 : matrix};
}

std::array<int64_t, kBatchAxes> BroadcastBatch(const char* op, const Shape& a, const Operand& x,
                                               const Shape& b, const Operand& y) {
  std::array<int64_t, kBatchAxes> batch{};
  for (int j = 0; j < kBatchAxes; ++j) {
    if (x.batch[j] != y.batch[j] && x.batch[j] != 1 && y.batch[j] != 1) {
      const int axis = j - kBatchAxes;  // counted from the matrix axes
      WEFT_THROW(op << ": the batch axes of a " << a << " and b " << b
                    << " do not broadcast: expected equal extents or 1 at batch axis " << axis
                    << " (counting back from the matrices), found " << x.batch[j] << " and "
                    << y.batch[j]);
    }
    batch[j] = std::max(x.batch[j], y.batch[j]);
  }
  return batch;
}

Shape OutputShape(const Shape& a, const Shape& b, const std::array<int64_t, kBatchAxes>& batch,
                  int64_t m, int64_t n) {
  Shape out;
  const int rank = std::max(a.ndim(), b.ndim());
  for (int j = kBatchAxes - (rank - 2); j < kBatchAxes; ++j) out.PushBack(batch[j]);
  out.PushBack(m);
  out.PushBack(n);
  return out;
}

// The gradient products (ops/nn/batch_dot.cc derives them): out_grad is dz, (m, n) like z.
void SetGradients(const BatchDotParam& p, const Operand& a, const Operand& b,
                  const std::array<int64_t, kBatchAxes>& dz_stride, BatchDotPlan& plan) {
  const BatchGemm& f = plan.forward;
  BatchGemm& ga = plan.grad_a;
  ga = {.batch = f.batch, .z_stride = a.stride};
  if (!p.transpose_a) {  // d_a (m, k) = dz op(b)^T
    ga.m = f.m, ga.n = f.k, ga.k = f.n, ga.trans_x = false, ga.trans_y = !p.transpose_b;
    ga.x_stride = dz_stride, ga.y_stride = b.stride, plan.grad_a_inputs = {0, 2};
  } else {  // d_a (k, m) = op(b) dz^T
    ga.m = f.k, ga.n = f.m, ga.k = f.n, ga.trans_x = p.transpose_b, ga.trans_y = true;
    ga.x_stride = b.stride, ga.y_stride = dz_stride, plan.grad_a_inputs = {2, 0};
  }
  BatchGemm& gb = plan.grad_b;
  gb = {.batch = f.batch, .z_stride = b.stride};
  if (!p.transpose_b) {  // d_b (k, n) = op(a)^T dz
    gb.m = f.k, gb.n = f.n, gb.k = f.m, gb.trans_x = !p.transpose_a, gb.trans_y = false;
    gb.x_stride = a.stride, gb.y_stride = dz_stride, plan.grad_b_inputs = {1, 0};
  } else {  // d_b (n, k) = dz^T op(a)
    gb.m = f.n, gb.n = f.k, gb.k = f.m, gb.trans_x = true, gb.trans_y = p.transpose_a;
    gb.x_stride = dz_stride, gb.y_stride = a.stride, plan.grad_b_inputs = {0, 1};
  }
}

}  // namespace

bool BatchGemm::SumsZ() const {
  for (int j = 0; j < kBatchAxes; ++j)
    if (batch[j] > 1 && z_stride[j] == 0) return true;
  return false;
}

BatchDotPlan BatchDotPlanOf(const char* op, const BatchDotParam& p, const Shape& a,
                            const Shape& b) {
  const Operand x = OperandOf(op, "a", a), y = OperandOf(op, "b", b);
  const int64_t m = p.transpose_a ? x.cols : x.rows, ka = p.transpose_a ? x.rows : x.cols;
  const int64_t n = p.transpose_b ? y.rows : y.cols, kb = p.transpose_b ? y.cols : y.rows;
  if (ka != kb) {
    WEFT_THROW(op << ": the inner extents differ: a " << a << " (transpose_a "
                  << (p.transpose_a ? "true" : "false") << ") has k = " << ka << ", b " << b
                  << " (transpose_b " << (p.transpose_b ? "true" : "false")
                  << ") expected the same, found k = " << kb);
  }
  BatchDotPlan plan;
  BatchGemm& f = plan.forward;
  f.batch = BroadcastBatch(op, a, x, b, y);
  f.m = m, f.n = n, f.k = ka, f.trans_x = p.transpose_a, f.trans_y = p.transpose_b;
  f.x_stride = x.stride, f.y_stride = y.stride, f.z_stride = DenseStrides(f.batch, m * n);
  plan.out = OutputShape(a, b, f.batch, m, n);
  SetGradients(p, x, y, f.z_stride, plan);
  return plan;
}

GemmSteps StepsOf(const BatchGemm& g) {
  GemmSteps s{.product = g};
  if (!g.SumsZ()) return s;
  const int64_t matrix = g.m * g.n;
  s.product.z_stride = DenseStrides(g.batch, matrix);
  s.scratch_size = g.Count() * matrix;
  // The scratch is (b0, b1, matrix). Summing axis 1 only: b0 sums of (b1, matrix) blocks; axis 0
  // only: one sum of (b0, b1 * matrix); both: one sum of (b0 * b1, matrix). Each is a product
  // (P, 1) = (R, P)^T (R, 1) over `count` blocks.
  const bool sum0 = g.batch[0] > 1 && g.z_stride[0] == 0;
  const bool sum1 = g.batch[1] > 1 && g.z_stride[1] == 0;
  int64_t p = matrix, r = g.Count(), count = 1;
  if (sum1 && !sum0) r = g.batch[1], count = g.batch[0];
  if (sum0 && !sum1) r = g.batch[0], p = g.batch[1] * matrix;
  BatchGemm sum{.batch = {1, count}, .m = p, .n = 1, .k = r, .trans_x = true, .trans_y = false};
  if (count > 1) sum.x_stride = {0, p * r}, sum.z_stride = {0, p};
  s.sum = sum;
  s.ones_size = r;
  return s;
}

}  // namespace weft
