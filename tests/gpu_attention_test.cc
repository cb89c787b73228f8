// Attention on gpu:0 against the CPU's (ops/gpu/attention.cc against ops/cpu/attention.cc), the
// forward outputs (out and the hidden lse) and the gradients of one backward call:
//   - weft's kernels in float32 (attention_tiled.cuh's for heads of at most 64 columns, the
//     default, and attention.cuh's, which WEFT_GPU_TILED_ATTENTION=0 gives them) and float64:
//     causal or not, no mask, a full mask and a padding mask, Tq != Tk, D and Dv not powers of two,
//     D over 256 (two column chunks), a query whose keys are all masked (out 0, lse -inf, no
//     gradient), several query and key tiles;
//   - bfloat16 (cuDNN's fused attention where it takes the call, weft's kernels where it does
//     not) against the CPU in float32 on the same bfloat16-exact inputs, within 16-bit bounds;
//   - cuDNN's plans built once per shape: a repeated call builds none.
// gpu_ops_attention_test also runs ops_attention_test's cases on the GPU (float32).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/env.h"
#include "ops/gpu/internal/cudnn_attention.h"
#include "ops/op.h"
#include "storage/ndarray.h"
#include "tests/gpu_op_test_util.h"
#include "tests/op_test_util.h"
#include "tests/weft_test_util.h"
#include "weft/imperative.h"

namespace weft::testing {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Problem {
  std::string name;
  int64_t b, h, tq, tk, d, dv;
  bool causal = false;
  Shape mask;  // no axes: no mask
  // Mask entries set to -inf (indices into the mask); the rest uniform in [-1, 1).
  std::vector<int64_t> masked = {};
};

std::vector<Shape> ShapesOf(const Problem& p) {
  std::vector<Shape> s = {Shape{p.b, p.h, p.tq, p.d}, Shape{p.b, p.h, p.tk, p.d},
                          Shape{p.b, p.h, p.tk, p.dv}};
  if (p.mask.ndim() > 0) s.push_back(p.mask);
  return s;
}

// Inputs uniform in [-1, 1) (bfloat16-exact when `bf16_exact`), the mask's masked entries -inf;
// the last entry is out_grad.
std::vector<Values> InputsOf(const Problem& p, bool bf16_exact) {
  std::vector<Values> in;
  const std::vector<Shape> shapes = ShapesOf(p);
  for (size_t i = 0; i < shapes.size(); ++i) {
    in.push_back(Uniform(shapes[i].Size(), 31 + i));
    if (bf16_exact) in.back() = Bf16Exact(in.back());
  }
  if (p.mask.ndim() > 0) {
    for (int64_t m : p.masked) in[3][m] = -kInf;
  }
  in.push_back(Uniform(p.b * p.h * p.tq * p.dv, 97));
  if (bf16_exact) in.back() = Bf16Exact(in.back());
  return in;
}

// (out, lse, d_q, d_k, d_v) of one forward and backward call on `device` in `dtype`.
std::vector<Values> RunCall(const Problem& p, const std::vector<Values>& values, Device device,
                            DType dtype) {
  AttrMap attrs = {{"causal", p.causal ? "true" : "false"}};
  if (p.mask.ndim() > 0) attrs["use_mask"] = "true";
  const Op& def = GetOp("Attention");
  const Attrs parsed = ParseAttrs(def, attrs);
  const std::vector<Shape> shapes = ShapesOf(p);
  std::vector<NDArray> in, grads;
  std::vector<OpReq> req(3, OpReq::kWrite);
  for (size_t i = 0; i < shapes.size(); ++i)
    in.push_back(ArrayOf(values[i], shapes[i], dtype, device));
  const std::vector<NDArray> out = Invoke(def, parsed, in);
  for (int i = 0; i < 3; ++i) grads.emplace_back(shapes[i], device, dtype);
  NDArray lse_grad(out[1].shape(), device, out[1].dtype());
  lse_grad.Fill(0);
  if (p.mask.ndim() > 0) grads.emplace_back(), req.push_back(OpReq::kNull);
  InvokeBackward(def, parsed, in, out,
                 {ArrayOf(values.back(), out[0].shape(), dtype, device), lse_grad}, grads, req);
  return {ValuesOf(out[0]), ValuesOf(out[1]), ValuesOf(grads[0]), ValuesOf(grads[1]),
          ValuesOf(grads[2])};
}

const char* const kOutputs[] = {"out", "lse", "d_q", "d_k", "d_v"};

// GPU in `gpu_type` against the CPU in float32 or float64 (`cpu_type`) on the same values.
void ExpectGpuMatchesCpu(const Problem& p, DType gpu_type, DType cpu_type, double tol) {
  const std::vector<Values> in = InputsOf(p, gpu_type == DType::kBFloat16);
  const std::vector<Values> want = RunCall(p, in, Device::Cpu(), cpu_type);
  const std::vector<Values> got = RunCall(p, in, Device::Gpu(0), gpu_type);
  for (int o = 0; o < 5; ++o) {
    ExpectNear(got[o], want[o], tol, p.name + " " + DTypeName(gpu_type).data() + " " + kOutputs[o]);
  }
}

std::vector<Problem> Problems() {
  return {
      {"plain", 2, 3, 5, 5, 8, 8},
      {"causal", 2, 2, 9, 9, 16, 16, true},
      {"tq < tk, D 20, Dv 12", 1, 2, 7, 13, 20, 12},
      {"tq > tk causal, D 48", 2, 1, 19, 11, 48, 40, true},
      {"tiles: 70 queries, 100 keys, causal", 1, 2, 70, 100, 24, 24, true},
      {"tiles of 64: 130 queries, 150 keys, D 64, causal", 1, 2, 130, 150, 64, 64, true},
      {"D 300, Dv 260: two column chunks", 1, 1, 33, 40, 300, 260},
      {"full mask", 2, 2, 6, 10, 8, 8, false, Shape{2, 2, 6, 10}},
      // (B, 1, 1, Tk): batch 1's last 4 keys are padding.
      {"padding mask", 2, 2, 37, 45, 16, 16, true, Shape{2, 1, 1, 45}, {86, 87, 88, 89}},
      // Query 2's keys are all masked: out 0, lse -inf, no gradient from it.
      {"fully masked row", 1, 2, 4, 6, 8, 8, false, Shape{4, 6}, {12, 13, 14, 15, 16, 17}},
  };
}

// attention.cuh's kernels for every head (WEFT_GPU_TILED_ATTENTION=0).
TEST(GpuAttention, Float32MatchesTheCpu) {
  ScopedEnv untiled("WEFT_GPU_TILED_ATTENTION", "0");
  for (const Problem& p : Problems())
    ExpectGpuMatchesCpu(p, DType::kFloat32, DType::kFloat32, 2e-4);
}

// attention_tiled.cuh's kernels (heads of at most 64 columns; the wider ones and float64 keep
// attention.cuh's), in float32 and in bfloat16 where cuDNN declines (a mask).
TEST(GpuAttention, TiledKernelsMatchTheCpu) {
  ScopedEnv tiled("WEFT_GPU_TILED_ATTENTION", "1");
  for (const Problem& p : Problems())
    ExpectGpuMatchesCpu(p, DType::kFloat32, DType::kFloat32, 2e-4);
  for (const Problem& p : Problems()) {
    if (p.mask.ndim() > 0) ExpectGpuMatchesCpu(p, DType::kBFloat16, DType::kFloat32, 2e-2);
  }
}

TEST(GpuAttention, Float64MatchesTheCpu) {
  for (const Problem& p : Problems())
    ExpectGpuMatchesCpu(p, DType::kFloat64, DType::kFloat64, 1e-10);
}

// bfloat16 outputs hold 8 bits of mantissa (relative rounding 2^-9), and cuDNN rounds the
// probabilities to bfloat16 before their product with v: 2e-2 of 1 + |want|.
TEST(GpuAttention, Bfloat16MatchesTheCpuInFloat32) {
  const std::vector<Problem> problems = {
      {"cuDNN plain, D 64", 2, 2, 64, 64, 64, 64},
      {"cuDNN causal, D 64", 2, 3, 128, 128, 64, 64, true},
      {"cuDNN tq != tk, D 32", 1, 2, 40, 72, 32, 32},
      {"weft's kernels: a mask", 2, 2, 37, 45, 16, 16, true, Shape{2, 1, 1, 45}, {86, 87}},
      {"weft's kernels or cuDNN: D 20", 1, 2, 9, 9, 20, 12},
  };
  for (const Problem& p : problems) ExpectGpuMatchesCpu(p, DType::kBFloat16, DType::kFloat32, 2e-2);
}

// (out, lse, d_qkv) of a causal call on a packed qkv (B, T, 3, H, D) (layout "bt3hd": out is
// (B, T, H, D)), out_grad and qkv from `seed`, bfloat16-exact.
std::vector<Values> RunPackedCall(int64_t b, int64_t h, int64_t t, int64_t d, Device device,
                                  DType dtype) {
  const Op& def = GetOp("Attention");
  const Attrs attrs = ParseAttrs(def, {{"causal", "true"}, {"layout", "bt3hd"}});
  const Shape qkv_shape{b, t, 3, h, d}, out_shape{b, t, h, d};
  const std::vector<NDArray> in = {
      ArrayOf(Bf16Exact(Uniform(qkv_shape.Size(), 41)), qkv_shape, dtype, device)};
  const std::vector<NDArray> out = Invoke(def, attrs, in);
  std::vector<NDArray> grads = {NDArray(qkv_shape, device, dtype)};
  NDArray lse_grad(out[1].shape(), device, out[1].dtype());
  lse_grad.Fill(0);
  const NDArray dy = ArrayOf(Bf16Exact(Uniform(out_shape.Size(), 43)), out_shape, dtype, device);
  InvokeBackward(def, attrs, in, out, {dy, lse_grad}, grads, {OpReq::kWrite});
  return {ValuesOf(out[0]), ValuesOf(out[1]), ValuesOf(grads[0])};
}

// GPT's packed qkv in bfloat16 runs cuDNN's attention through the parts' strides (no transposes)
// and gives the CPU's float32 results, as the (B, H, T, D) layout does.
TEST(GpuAttention, PackedQkvInBfloat16MatchesTheCpuThroughCudnnsStrides) {
  const gpu::CudnnAttentionStats before = gpu::GetCudnnAttentionStats();
  const std::vector<Values> got = RunPackedCall(2, 3, 128, 64, Device::Gpu(0), DType::kBFloat16);
  const std::vector<Values> want = RunPackedCall(2, 3, 128, 64, Device::Cpu(), DType::kFloat32);
  const char* const names[] = {"out", "lse", "d_qkv"};
  for (int o = 0; o < 3; ++o) ExpectNear(got[o], want[o], 2e-2, std::string("packed ") + names[o]);
  if (GetEnvBool("WEFT_GPU_CUDNN_ATTENTION", true)) {
    const gpu::CudnnAttentionStats after = gpu::GetCudnnAttentionStats();
    EXPECT_EQ(after.plans_built, before.plans_built + 2)
        << "cuDNN built the packed layout's forward and backward plans (declined: "
        << after.declined - before.declined << ")";
  }
}

// One call of `op`'s GPU compute on `stream`, with zero-filled inputs and outputs of these shapes
// and dtypes: one stream and one thread, so one cuDNN handle, whose plans these are (through the
// engine, a call may run on any of the device's workers, each with a handle of its own).
void ComputeOnStream(TestStream& stream, const std::string& op,
                     const std::vector<std::pair<Shape, DType>>& in,
                     const std::vector<std::pair<Shape, DType>>& out) {
  const Op& def = GetOp(op);
  const Attrs attrs = ParseAttrs(def, {{"causal", "true"}});
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  auto views = [&](const std::vector<std::pair<Shape, DType>>& arrays) {
    std::vector<TensorView> v;
    for (const auto& [shape, dtype] : arrays) {
      const size_t bytes = shape.Size() * DTypeSize(dtype);
      buffers.push_back(std::make_unique<DeviceBuffer>(bytes));
      buffers.back()->Upload(std::vector<char>(bytes, 0).data(), bytes);
      v.emplace_back(buffers.back()->get(), shape, dtype, Device::Gpu(0));
    }
    return v;
  };
  const std::vector<TensorView> inputs = views(in), outputs = views(out);
  OpContext ctx;
  ctx.run.device = Device::Gpu(0);
  ctx.run.stream = &stream.get();
  def.On(DeviceType::kGpu)
      .compute(ctx, attrs, inputs, std::vector<OpReq>(out.size(), OpReq::kWrite), outputs);
  stream.Synchronize();
}

// Plans built plus calls declined after a forward and a backward of causal bfloat16 attention of
// (2, 2, t, 64) on `stream`.
int64_t BuildsAndDeclinesAfterACall(TestStream& stream, int64_t t) {
  const Shape x{2, 2, t, 64}, lse{2, 2, t};
  const DType bf16 = DType::kBFloat16, f32 = DType::kFloat32;
  ComputeOnStream(stream, "Attention", {{x, bf16}, {x, bf16}, {x, bf16}}, {{x, bf16}, {lse, f32}});
  ComputeOnStream(stream, "_backward_Attention",
                  {{x, bf16}, {x, bf16}, {x, bf16}, {x, bf16}, {x, bf16}, {lse, f32}},
                  {{x, bf16}, {x, bf16}, {x, bf16}});
  const gpu::CudnnAttentionStats s = gpu::GetCudnnAttentionStats();
  return s.plans_built + s.declined;
}

// The first call of a shape builds its forward and backward plans (or finds cuDNN declines them);
// later calls of that shape build and ask nothing; a new shape builds again.
TEST(GpuAttention, CudnnPlansAreBuiltOncePerShape) {
  if (!GetEnvBool("WEFT_GPU_CUDNN_ATTENTION", true))
    GTEST_SKIP() << "cuDNN's attention is off (WEFT_GPU_CUDNN_ATTENTION=0)";
  TestStream stream;
  const gpu::CudnnAttentionStats before = gpu::GetCudnnAttentionStats();
  const int64_t first = BuildsAndDeclinesAfterACall(stream, 192);
  EXPECT_EQ(first, before.plans_built + before.declined + 2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(BuildsAndDeclinesAfterACall(stream, 192), first);
  EXPECT_EQ(BuildsAndDeclinesAfterACall(stream, 256), first + 2);
  EXPECT_EQ(BuildsAndDeclinesAfterACall(stream, 192), first + 2);
}

}  // namespace
}  // namespace weft::testing
