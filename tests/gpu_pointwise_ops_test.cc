// The GPU computes of the pointwise ops (ops/gpu) against their CPU computes: every unary,
// binary (with broadcasting and the broadcast-gradient reductions), add_n, fill/copy and
// optimizer op, forward and backward, with the requests kWrite and kAddTo, in float32 and (for
// the elementwise ops) bfloat16; and a clear error for a dtype the GPU op does not take.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "core/tensor_view.h"
#include "tests/gpu_op_test_util.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

using testing::FromBf16;
using testing::OpCall;
using testing::RunCompute;
using testing::ToBf16;

using Arrays = std::vector<std::vector<float>>;

// Deterministic values in [-2, 2], or [0.25, 2.25] when `positive`; bfloat16-exact when `bf16`.
std::vector<float> Values(int64_t n, int seed, bool positive, bool bf16) {
  std::vector<float> v(n);
  uint32_t state = 2463534242u + 977u * seed;
  for (float& x : v) {
    state ^= state << 13, state ^= state >> 17, state ^= state << 5;
    const float u = static_cast<float>(state >> 8) / 16777216.0f;
    x = positive ? 0.25f + 2 * u : 4 * u - 2;
    if (bf16) x = FromBf16(ToBf16(x));
  }
  return v;
}

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu, double tolerance,
                 const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i) {
    if (std::isnan(gpu[i]) && std::isnan(cpu[i])) continue;
    ASSERT_LE(std::abs(gpu[i] - cpu[i]), tolerance * std::max(1.0f, std::abs(cpu[i])))
        << what << " at " << i << ": gpu " << gpu[i] << ", cpu " << cpu[i];
  }
}

struct Case {
  std::string op;
  AttrMap attrs;
  std::vector<Shape> shapes;
  bool positive = false;  // inputs > 0 (log, sqrt)
};

// Runs `c` on both devices with every output requested as `req`, and compares outputs and
// (updated in place) inputs. bfloat16: the GPU computes in bfloat16, the CPU in float32 from the
// same (bfloat16-exact) values.
void ExpectGpuMatchesCpu(const Case& c, DType dtype, OpReq req) {
  const bool bf16 = dtype == DType::kBFloat16;
  const Op& op = GetOp(c.op);
  const Attrs attrs = ParseAttrs(op, c.attrs);
  const std::vector<Shape> out_shapes = InferShapes(op, attrs, c.shapes);
  Arrays in, out;
  for (size_t i = 0; i < c.shapes.size(); ++i)
    in.push_back(Values(c.shapes[i].Size(), i, c.positive, bf16));
  for (size_t i = 0; i < out_shapes.size(); ++i)
    out.push_back(Values(out_shapes[i].Size(), 50 + i, false, bf16));
  const std::vector<OpReq> reqs(out.size(), req);
  Arrays cpu_in = in, cpu_out = out, gpu_in = in, gpu_out = out;
  const OpCall call{c.op, c.attrs, c.shapes};
  RunCompute(call, Device::Cpu(), DType::kFloat32, cpu_in, reqs, cpu_out);
  RunCompute(call, Device::Gpu(0), dtype, gpu_in, reqs, gpu_out);
  const double tolerance = bf16 ? 1.6e-2 : 2e-5;
  const std::string what =
      c.op + (bf16 ? " bfloat16" : " float32") + (req == OpReq::kAddTo ? " add-to" : " write");
  for (size_t i = 0; i < out.size(); ++i)
    ExpectClose(gpu_out[i], cpu_out[i], tolerance, what + " output " + std::to_string(i));
  for (size_t i = 0; i < in.size(); ++i)
    ExpectClose(gpu_in[i], cpu_in[i], tolerance, what + " input " + std::to_string(i));
}

void ExpectGpuMatchesCpu(const std::vector<Case>& cases, std::vector<DType> dtypes) {
  for (const Case& c : cases) {
    for (DType dtype : dtypes) {
      for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) ExpectGpuMatchesCpu(c, dtype, req);
    }
  }
}

// Each unary op forward, and its backward op on dy and what its gradient reads (x, y or nothing).
std::vector<Case> UnaryCases() {
  const Shape s{3, 1029};  // not a whole number of packs
  std::vector<Case> cases;
  auto add = [&](const std::string& op, AttrMap attrs, bool positive) {
    cases.push_back({op, attrs, {s}, positive});
    const Op& backward = GetOp("_backward_" + op);
    cases.push_back({backward.name, attrs,
                     std::vector<Shape>(NumInputs(backward, ParseAttrs(backward, attrs)), s),
                     positive});
  };
  for (const char* op : {"neg", "exp", "square", "abs", "sigmoid", "tanh", "relu", "softrelu",
                         "erf", "gelu", "gelu_tanh"})
    add(op, {}, false);
  add("gelu", {{"approximate", "tanh"}}, false);
  for (const char* op : {"log", "sqrt"}) add(op, {}, true);
  for (const char* op : {"add_scalar", "sub_scalar", "rsub_scalar", "mul_scalar", "div_scalar",
                         "maximum_scalar", "minimum_scalar"}) {
    add(op, {{"scalar", "0.75"}}, false);
  }
  add("rdiv_scalar", {{"scalar", "-1.5"}}, true);
  for (const char* act : {"relu", "sigmoid", "tanh", "softrelu", "gelu", "gelu_tanh"})
    add("Activation", {{"act_type", act}}, false);
  return cases;
}

// Each binary op on one shape and broadcast, forward, and backward on (dy, lhs, rhs).
std::vector<Case> BinaryCases() {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {Shape{5, 203}, Shape{5, 203}},      // no broadcasting
      {Shape{4, 5, 6}, Shape{6}},          // a bias
      {Shape{3, 1, 5}, Shape{4, 1}},       // both broadcast
      {Shape{2, 3, 4}, Shape{1}},          // a scalar
      {Shape{6}, Shape{2, 3, 6}},          // lhs broadcast
      {Shape{256, 512}, Shape{512}},       // a gradient per thread (lhs) and per block (rhs)
      {Shape{70000, 2}, Shape{70000, 1}},  // short sums, a thread each
  };
  std::vector<Case> cases;
  for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum"}) {
    const bool positive = std::string(op) == "div";
    for (const auto& [l, r] : shapes) {
      cases.push_back({op, {}, {l, r}, positive});
      const Shape out = InferShapes(GetOp(op), ParseAttrs(GetOp(op), {}), {l, r})[0];
      cases.push_back({std::string("_backward_") + op, {}, {out, l, r}, positive});
    }
  }
  return cases;
}

TEST(GpuPointwiseOps, UnaryMatchCpu) {
  ExpectGpuMatchesCpu(UnaryCases(), {DType::kFloat32, DType::kBFloat16});
}

TEST(GpuPointwiseOps, BinaryMatchCpu) {
  ExpectGpuMatchesCpu(BinaryCases(), {DType::kFloat32, DType::kBFloat16});
}

TEST(GpuPointwiseOps, AddNMatchesCpu) {
  ExpectGpuMatchesCpu(
      {{"add_n", {{"num_args", "3"}}, {Shape{1001}, Shape{1001}, Shape{1001}}},
       {"add_n", {{"num_args", "40"}}, std::vector<Shape>(40, Shape{77, 3})}},  // two launches
      {DType::kFloat32, DType::kBFloat16});
}

TEST(GpuPointwiseOps, FillAndCopyMatchCpu) {
  const Shape s{33, 17};
  ExpectGpuMatchesCpu({{"zeros_like", {}, {s}},
                       {"ones_like", {}, {s}},
                       {"_copy", {}, {s}},
                       {"stop_gradient", {}, {s}}},
                      {DType::kFloat32, DType::kBFloat16});
}

TEST(GpuPointwiseOps, OptimizersMatchCpu) {
  const Shape s{1000, 3};
  const AttrMap common = {
      {"lr", "0.1"}, {"wd", "0.01"}, {"rescale_grad", "0.5"}, {"clip_gradient", "0.6"}};
  AttrMap mom = common, adam = common;
  mom["momentum"] = "0.9";
  adam["beta1"] = "0.8";
  ExpectGpuMatchesCpu({{"sgd_update", common, {s, s}},
                       {"sgd_mom_update", mom, {s, s, s}},
                       {"adam_update", adam, {s, s, s, s}, /*positive=*/true}},  // v >= 0
                      {DType::kFloat32});
}

TEST(GpuPointwiseOps, MisalignedArraysTakeTheElementPath) {
  const int64_t n = 1027;
  testing::DeviceBuffer x((n + 1) * sizeof(float)), y((n + 1) * sizeof(float));
  const std::vector<float> values = Values(n + 1, 3, false, false);
  x.Upload(values.data(), values.size() * sizeof(float));
  testing::TestStream stream;
  OpContext ctx;
  ctx.run.device = Device::Gpu(0);
  ctx.run.stream = &stream.get();
  // One float past a 256-byte boundary: not 16-byte aligned.
  const TensorView in(static_cast<float*>(x.get()) + 1, Shape{n}, DType::kFloat32, Device::Gpu(0));
  const TensorView out(static_cast<float*>(y.get()) + 1, Shape{n}, DType::kFloat32, Device::Gpu(0));
  const Op& relu = GetOp("relu");
  const OpReq req = OpReq::kWrite;
  relu.On(DeviceType::kGpu).compute(ctx, ParseAttrs(relu, {}), {&in, 1}, {&req, 1}, {&out, 1});
  stream.Synchronize();
  std::vector<float> result(n + 1);
  y.Download(result.data(), result.size() * sizeof(float));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(result[i + 1], std::max(values[i + 1], 0.0f)) << i;
}

TEST(GpuPointwiseOps, UnsupportedDTypeIsAClearError) {
  const OpCall call{"relu", {}, {Shape{8}}};
  Arrays in = {std::vector<float>(8)}, out = {std::vector<float>(8)};
  testing::ExpectErrorContains(
      [&] { RunCompute(call, Device::Gpu(0), DType::kInt32, in, {OpReq::kWrite}, out); },
      {"relu on GPU", "expected float32, float64, bfloat16 or float16", "found int32"});
  const OpCall sgd{"sgd_update", {{"lr", "0.1"}}, {Shape{8}, Shape{8}}};
  Arrays sgd_in = {std::vector<float>(8), std::vector<float>(8)};
  testing::ExpectErrorContains(
      [&] { RunCompute(sgd, Device::Gpu(0), DType::kInt32, sgd_in, {OpReq::kWrite}, out); },
      {"sgd_update on GPU", "expected float32, float64, bfloat16 or float16", "found int32"});
}

// The whole library, not only the pointwise ops: every operator the CPU has runs on a GPU, but
// those only a pass of CPU binds makes (passes/pipeline.h: fold_depthwise runs on CPU inference
// binds alone), which must then be pass-only ops without one.
TEST(GpuPointwiseOps, EveryOperatorHasAGpuCompute) {
  const std::set<std::string> cpu_pass_only = {"_conv_depthwise"};
  for (const std::string& name : ListOps()) {
    const Op& op = GetOp(name);
    if (cpu_pass_only.count(name) != 0) {
      EXPECT_TRUE(op.pass_only && !op.On(DeviceType::kGpu)) << name;
      continue;
    }
    EXPECT_TRUE(op.On(DeviceType::kGpu).compute != nullptr) << name << " has no GPU compute";
  }
}

TEST(GpuPointwiseOps, EveryGpuComputeNamesARegisteredOp) {
  EXPECT_TRUE(UnmatchedDeviceImpls().empty());
  for (const char* op :
       {"relu", "_backward_gelu", "add", "_backward_div", "add_n", "zeros_like", "_copy",
        "sgd_mom_update", "adam_update", "Dropout", "Activation", "_backward_Activation"}) {
    EXPECT_TRUE(GetOp(op).On(DeviceType::kGpu).compute) << op;
  }
}

}  // namespace
}  // namespace weft
