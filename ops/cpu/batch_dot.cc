// CPU compute of batch_dot, matmul and _backward_batch_dot (ops/nn/batch_dot.cc defines them and
// says what they compute). Each product is a BatchGemm (ops/nn/batch_gemm.h): float32 and
// bfloat16 (float32 accumulation) run oneDNN's matmul primitive, which reads transposed matrices
// and broadcast batch axes through its strides and batch extents of 1, threaded by oneDNN;
// float64 runs the loops below. A product summed over a broadcast axis (the gradient of a
// broadcast operand) runs into scratch, then its sum is one more product with a ones vector; for
// bfloat16 the scratch is bfloat16, so such a gradient rounds twice.
#include <algorithm>
#include <array>
#include <sstream>
#include <string>
#include <vector>

#include "core/bfloat16.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/dnnl_util.h"
#include "ops/nn/batch_gemm.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

// ---- float32 and bfloat16: oneDNN matmul ----

// The axes oneDNN sees: the two batch axes while the first is used, one, or none.
int NdimsOf(const BatchGemm& g) { return g.batch[0] > 1 ? 4 : g.batch[1] > 1 ? 3 : 2; }

// A (rows, cols) operand with these batch strides, row-major or (`transposed`) stored (cols,
// rows); extent 1 along the axes it is broadcast on.
dnnl::memory::desc OperandDesc(const BatchGemm& g, DType dtype, int64_t rows, int64_t cols,
                               bool transposed, const std::array<int64_t, kBatchAxes>& stride) {
  const int ndims = NdimsOf(g);
  dnnl::memory::dims dims, strides;
  for (int j = kBatchAxes - (ndims - 2); j < kBatchAxes; ++j) {
    dims.push_back(stride[j] == 0 ? 1 : g.batch[j]);
    strides.push_back(stride[j] == 0 ? rows * cols : stride[j]);
  }
  dims.insert(dims.end(), {rows, cols});
  strides.insert(strides.end(), {transposed ? 1 : cols, transposed ? rows : 1});
  const auto type =
      dtype == DType::kBFloat16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
  return dnnl::memory::desc(dims, type, strides);
}

struct GemmDescs {
  dnnl::memory::desc x, y, z;
};

GemmDescs DescsOf(const BatchGemm& g, DType dtype) {
  return {OperandDesc(g, dtype, g.m, g.k, g.trans_x, g.x_stride),
          OperandDesc(g, dtype, g.k, g.n, g.trans_y, g.y_stride),
          OperandDesc(g, dtype, g.m, g.n, false, g.z_stride)};
}

std::string KeyOf(const BatchGemm& g, DType dtype) {
  std::ostringstream os;
  os << g.batch[0] << 'x' << g.batch[1] << '|' << g.m << ',' << g.n << ',' << g.k << '|'
     << g.trans_x << g.trans_y;
  for (const auto* s : {&g.x_stride, &g.y_stride, &g.z_stride})
    os << '|' << (*s)[0] << ',' << (*s)[1];
  return PrimitiveKey("batch_dot", dtype, os.str());
}

DnnlPrimitive GemmPrimitive(const BatchGemm& g, DType dtype) {
  return CachedPrimitive(KeyOf(g, dtype), [&] {
    const GemmDescs d = DescsOf(g, dtype);
    return MakePrimitive<dnnl::matmul>(
        {dnnl::matmul::desc(d.x, d.y, d.z), ScratchpadAttr(), DnnlEngine()});
  });
}

void RunDnnl(const BatchGemm& g, DType dtype, const void* x, const void* y, void* z, void* pad) {
  const GemmDescs d = DescsOf(g, dtype);
  const dnnl::engine& e = DnnlEngine();
  ExecutePrimitive(GemmPrimitive(g, dtype),
                   {{DNNL_ARG_SRC, dnnl::memory(d.x, e, const_cast<void*>(x))},
                    {DNNL_ARG_WEIGHTS, dnnl::memory(d.y, e, const_cast<void*>(y))},
                    {DNNL_ARG_DST, dnnl::memory(d.z, e, z)}},
                   pad);
}

// ---- float64: loops ----

// z[i] = op(x[i]) op(y[i]) for a z that sums over no axis; parallel over the batch's rows.
template <typename T>
void GemmLoops(const BatchGemm& g, const T* x, const T* y, T* z) {
  ParallelFor(g.Count() * g.m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i0 = r / g.m / g.batch[1], i1 = r / g.m % g.batch[1], i = r % g.m;
      const T* xb = x + i0 * g.x_stride[0] + i1 * g.x_stride[1];
      const T* yb = y + i0 * g.y_stride[0] + i1 * g.y_stride[1];
      T* zr = z + i0 * g.z_stride[0] + i1 * g.z_stride[1] + i * g.n;
      for (int64_t j = 0; j < g.n; ++j) {
        T sum = 0;
        for (int64_t l = 0; l < g.k; ++l) {
          const T xv = g.trans_x ? xb[l * g.m + i] : xb[i * g.k + l];
          sum += xv * (g.trans_y ? yb[j * g.k + l] : yb[l * g.n + j]);
        }
        zr[j] = sum;
      }
    }
  });
}

// ---- both ----

// One product a call computes: its steps, and x, y and z.
struct Product {
  GemmSteps steps;
  const void* x;
  const void* y;
};

// The workspace parts every product of a call may use: oneDNN's scratchpad, the scratch z of a
// summed product, and its ones.
std::array<size_t, 3> ExtraBytes(std::span<const Product> products, DType dtype) {
  std::array<size_t, 3> bytes{};
  for (const Product& p : products) {
    for (const BatchGemm* g : {&p.steps.product, p.steps.sum ? &*p.steps.sum : nullptr}) {
      if (g && dtype != DType::kFloat64)
        bytes[0] = std::max(bytes[0], ScratchpadBytes(GemmPrimitive(*g, dtype)));
    }
    bytes[1] = std::max(bytes[1], static_cast<size_t>(p.steps.scratch_size) * DTypeSize(dtype));
    bytes[2] = std::max(bytes[2], static_cast<size_t>(p.steps.ones_size) * DTypeSize(dtype));
  }
  return bytes;
}

void RunGemm(const BatchGemm& g, DType dtype, const void* x, const void* y, void* z, void* pad) {
  if (dtype == DType::kFloat64) {
    GemmLoops(g, static_cast<const double*>(x), static_cast<const double*>(y),
              static_cast<double*>(z));
  } else {
    RunDnnl(g, dtype, x, y, z, pad);
  }
}

void FillOnes(DType dtype, void* ones, int64_t n) {
  if (dtype == DType::kFloat64) std::fill_n(static_cast<double*>(ones), n, 1.0);
  if (dtype == DType::kFloat32) std::fill_n(static_cast<float*>(ones), n, 1.0f);
  if (dtype == DType::kBFloat16)
    std::fill_n(static_cast<BFloat16*>(ones), n, BFloat16::FromFloat(1.0f));
}

// Output i = product i, for each output someone reads, as its request says.
void RunProducts(const OpContext& ctx, const char* op, DType dtype,
                 std::span<const Product> products, std::span<const OpReq> req,
                 std::span<const TensorView> out) {
  if (dtype != DType::kFloat64 && dtype != DType::kFloat32 && dtype != DType::kBFloat16)
    WEFT_THROW(op << ": expected float32, float64 or bfloat16, found " << dtype);
  const std::array<size_t, 3> extra = ExtraBytes(products, dtype);
  const StagedOutputs staged(ctx, req, out, false, {extra[0], extra[1], extra[2]});
  for (size_t i = 0; i < products.size(); ++i) {
    if (!staged.Needed(static_cast<int>(i))) continue;
    const GemmSteps& s = products[i].steps;
    void* z = staged.Target(static_cast<int>(i)).raw();
    if (!s.sum) {
      RunGemm(s.product, dtype, products[i].x, products[i].y, z, staged.Extra(0));
      continue;
    }
    RunGemm(s.product, dtype, products[i].x, products[i].y, staged.Extra(1), staged.Extra(0));
    FillOnes(dtype, staged.Extra(2), s.ones_size);
    RunGemm(*s.sum, dtype, staged.Extra(1), staged.Extra(2), z, staged.Extra(0));
  }
  staged.Finish();
}

// in: (a, b); out: (a * b).
void BatchDotForward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                     std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const BatchDotPlan plan =
      BatchDotPlanOf("batch_dot", a.Get<BatchDotParam>(), in[0].shape(), in[1].shape());
  const Product products[] = {{StepsOf(plan.forward), in[0].raw(), in[1].raw()}};
  RunProducts(ctx, "batch_dot", in[0].dtype(), products, req, out);
}

// in: (out_grad, a, b); out: (d_a, d_b).
void BatchDotBackward(const OpContext& ctx, const Attrs& a, std::span<const TensorView> in,
                      std::span<const OpReq> req, std::span<const TensorView> out) {
  const BatchDotPlan plan =
      BatchDotPlanOf("_backward_batch_dot", a.Get<BatchDotParam>(), in[1].shape(), in[2].shape());
  const Product products[] = {
      {StepsOf(plan.grad_a), in[plan.grad_a_inputs[0]].raw(), in[plan.grad_a_inputs[1]].raw()},
      {StepsOf(plan.grad_b), in[plan.grad_b_inputs[0]].raw(), in[plan.grad_b_inputs[1]].raw()}};
  RunProducts(ctx, "_backward_batch_dot", in[0].dtype(), products, req, out);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {
                               {"batch_dot", {.compute = BatchDotForward}},
                               {"matmul", {.compute = BatchDotForward}},
                               {"_backward_batch_dot", {.compute = BatchDotBackward}},
                           });

}  // namespace
}  // namespace weft::cpu
