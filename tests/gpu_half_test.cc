// The 16-bit floats on the GPU, bfloat16 and float16: FullyConnected and Convolution forward and
// backward (float32 accumulation), pooling and the elementwise ops of an MLP, on inputs both types
// hold exactly, against float32 on the CPU. The GPU rounds each result to 16 bits once
// (FullyConnected's bias is added in cuBLASLt's epilogue, Convolution's is where its output
// starts, both before the rounding), so it is within half a unit (2^-9 relative for bfloat16,
// 2^-12 for float16) of the float32 result, plus float32 summation-order noise. Cast rounds to
// nearest even, float16 to its range (overflow to infinity, subnormals).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "storage/ndarray.h"
#include "weft/imperative.h"

namespace weft {
namespace {

const Device kGpu = Device::Gpu(0);
// |gpu - cpu| <= tol * (1 + |cpu|): about one bf16 unit (eight float16 units)
constexpr double kBf16Tolerance = 4e-3;
// A gradient added to a bf16 array is rounded twice (cuDNN's result, then the sum): up to one unit
// of the sum, 2^-7 relative. Seen on the H200: 3.5422 + 0.5 gave 4.0625 (3.5469 + 0.5 = 4.0469,
// a tie rounded to even), where float32 gives 4.0422.
constexpr double kBf16AddTolerance = 2 * kBf16Tolerance;

// Random values that bf16 (and so float16: in [-1, 1], more bits) holds exactly (rounded through
// Cast on the CPU).
NDArray Bf16ExactCpu(const Shape& shape, int seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(static_cast<size_t>(shape.Size()));
  for (float& x : v) x = u(rng);
  NDArray bf16 = Invoke("Cast", {NDArray::FromVector(v, shape)}, {{"dtype", "bfloat16"}})[0];
  return Invoke("Cast", {bf16}, {{"dtype", "float32"}})[0];
}

class GpuHalf : public ::testing::TestWithParam<DType> {
 protected:
  // A float32 CPU array as a GPU array of the test's dtype (cast on the GPU).
  NDArray ToGpu(const NDArray& cpu_float) const {
    return Invoke("Cast", {cpu_float.Copy(kGpu)},
                  {{"dtype", std::string(DTypeName(GetParam()))}})[0];
  }
  std::vector<float> ToHostFloat(const NDArray& gpu) const {
    EXPECT_EQ(gpu.dtype(), GetParam());
    return Invoke("Cast", {gpu}, {{"dtype", "float32"}})[0].ToVector<float>();
  }
  void ExpectLayerMatchesFloat32(const std::string& op_name, const AttrMap& attrs,
                                 const std::vector<NDArray>& cpu) const;
  std::string Name() const { return std::string(DTypeName(GetParam())); }
};
INSTANTIATE_TEST_SUITE_P(BFloat16AndFloat16, GpuHalf,
                         ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

void ExpectClose(const std::vector<float>& gpu, const std::vector<float>& cpu,
                 const std::string& what, double tolerance = kBf16Tolerance) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (size_t i = 0; i < gpu.size(); ++i) {
    ASSERT_LE(std::abs(gpu[i] - cpu[i]), tolerance * (1 + std::abs(cpu[i])))
        << what << ": element " << i << " is " << gpu[i] << " on the GPU, " << cpu[i]
        << " on the CPU";
  }
}

// `op` on the 16-bit GPU copies of `cpu` (bf16-exact float32 arrays) against float32 on the CPU:
// forward, and the gradient rule with requests write and add.
void GpuHalf::ExpectLayerMatchesFloat32(const std::string& op_name, const AttrMap& attrs,
                                        const std::vector<NDArray>& cpu) const {
  std::vector<NDArray> gpu;
  for (const NDArray& a : cpu) gpu.push_back(ToGpu(a));
  const NDArray y_cpu = Invoke(op_name, cpu, attrs)[0];
  const NDArray y_gpu = Invoke(op_name, gpu, attrs)[0];
  ExpectClose(ToHostFloat(y_gpu), y_cpu.ToVector<float>(), op_name + " " + Name() + " forward");

  const Op& op = GetOp(op_name);
  const Attrs parsed = ParseAttrs(op, attrs);
  const NDArray dy_cpu = Bf16ExactCpu(y_cpu.shape(), 4), dy_gpu = ToGpu(dy_cpu);
  for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) {
    std::vector<NDArray> g_cpu, g_gpu;
    for (const NDArray& a : cpu) {
      g_cpu.emplace_back(a.shape());
      g_cpu.back().Fill(0.5);
      g_gpu.push_back(ToGpu(g_cpu.back()));
    }
    const std::vector<OpReq> reqs(cpu.size(), req);
    InvokeBackward(op, parsed, cpu, {y_cpu}, {dy_cpu}, g_cpu, reqs);
    InvokeBackward(op, parsed, gpu, {y_gpu}, {dy_gpu}, g_gpu, reqs);
    for (size_t i = 0; i < cpu.size(); ++i) {
      ExpectClose(ToHostFloat(g_gpu[i]), g_cpu[i].ToVector<float>(),
                  op_name + " " + Name() + " gradient of input " + std::to_string(i) +
                      (req == OpReq::kAddTo ? " (add)" : ""),
                  req == OpReq::kAddTo ? kBf16AddTolerance : kBf16Tolerance);
    }
  }
}

TEST_P(GpuHalf, FullyConnectedForwardAndBackwardMatchFloat32) {
  ExpectLayerMatchesFloat32("FullyConnected", {{"num_hidden", "64"}},
                            {Bf16ExactCpu(Shape{32, 100}, 1), Bf16ExactCpu(Shape{64, 100}, 2),
                             Bf16ExactCpu(Shape{64}, 3)});
}

// cuDNN on 16-bit tensors, computing in float: plain, and grouped, dilated, strided and padded, the
// bias added before the one rounding.
TEST_P(GpuHalf, ConvolutionForwardAndBackwardMatchFloat32) {
  ExpectLayerMatchesFloat32("Convolution",
                            {{"kernel", "(3, 3)"}, {"pad", "(1, 1)"}, {"num_filter", "8"}},
                            {Bf16ExactCpu(Shape{4, 6, 10, 9}, 5),
                             Bf16ExactCpu(Shape{8, 6, 3, 3}, 6), Bf16ExactCpu(Shape{8}, 7)});
  ExpectLayerMatchesFloat32("Convolution",
                            {{"kernel", "(3, 2)"},
                             {"stride", "(2, 1)"},
                             {"pad", "(2, 1)"},
                             {"dilate", "(2, 2)"},
                             {"num_filter", "8"},
                             {"num_group", "2"}},
                            {Bf16ExactCpu(Shape{2, 4, 11, 8}, 8),
                             Bf16ExactCpu(Shape{8, 2, 3, 2}, 9), Bf16ExactCpu(Shape{8}, 10)});
  ExpectLayerMatchesFloat32(  // depthwise, no bias
      "Convolution",
      {{"kernel", "(3, 3)"}, {"num_filter", "6"}, {"num_group", "6"}, {"no_bias", "true"}},
      {Bf16ExactCpu(Shape{2, 6, 7, 7}, 11), Bf16ExactCpu(Shape{6, 1, 3, 3}, 12)});
}

// weft's kernels on 16-bit data (float arithmetic): max and average windows, padded, strided, ceil
// mode (a window past the padding), global.
TEST_P(GpuHalf, PoolingForwardAndBackwardMatchFloat32) {
  const NDArray x = Bf16ExactCpu(Shape{2, 3, 9, 8}, 13);
  ExpectLayerMatchesFloat32("Pooling",
                            {{"kernel", "(3, 3)"}, {"stride", "(2, 2)"}, {"pad", "(1, 1)"}}, {x});
  ExpectLayerMatchesFloat32("Pooling",
                            {{"kernel", "(2, 3)"},
                             {"stride", "(2, 2)"},
                             {"pool_type", "avg"},
                             {"pooling_convention", "full"},
                             {"count_include_pad", "false"}},
                            {x});
  ExpectLayerMatchesFloat32("Pooling", {{"global_pool", "true"}, {"pool_type", "avg"}}, {x});
}

TEST_P(GpuHalf, ElementwiseOpsOfAnMlpMatchFloat32) {
  const NDArray a = Bf16ExactCpu(Shape{4, 300}, 5), b = Bf16ExactCpu(Shape{4, 300}, 6);
  for (const char* op : {"relu", "sigmoid", "tanh", "add", "mul"}) {
    const bool binary = std::string(op) == "add" || std::string(op) == "mul";
    const std::vector<NDArray> in_cpu =
        binary ? std::vector<NDArray>{a, b} : std::vector<NDArray>{a};
    std::vector<NDArray> in_gpu;
    for (const NDArray& x : in_cpu) in_gpu.push_back(ToGpu(x));
    ExpectClose(ToHostFloat(Invoke(op, in_gpu)[0]), Invoke(op, in_cpu)[0].ToVector<float>(),
                std::string(op) + " " + Name());
  }
}

TEST(GpuHalfCast, BFloat16RoundsToNearestEvenLikeTheCpu) {
  const NDArray x = NDArray::FromVector(
      std::vector<float>{1.0f, 1.00390625f, 1.01171875f, -3.3f, 65504.5f, 1e-30f}, Shape{6});
  const NDArray cpu = Invoke("Cast", {x}, {{"dtype", "bfloat16"}})[0];
  const NDArray gpu = Invoke("Cast", {x.Copy(kGpu)}, {{"dtype", "bfloat16"}})[0];
  EXPECT_EQ(Invoke("Cast", {gpu}, {{"dtype", "float32"}})[0].ToVector<float>(),
            Invoke("Cast", {cpu}, {{"dtype", "float32"}})[0].ToVector<float>());
}

// float16 (no CPU conversion to compare with): ties to even, the largest value, overflow to
// infinity past it, subnormals and underflow to zero, signs and NaN; from float64 in one rounding.
TEST(GpuHalfCast, Float16RoundsToNearestEvenWithinItsRange) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f,     1 + 0x1p-11f, 1 + 0x3p-11f, -3.3f,    65504.0f,
                                65519.0f, 65520.0f,     0x1p-24f,     0x1p-26f, -0.0f};
  const std::vector<float> want = {1.0f,     1.0f, 1 + 0x1p-9f, -3.30078125f, 65504.0f,
                                   65504.0f, inf,  0x1p-24f,    0.0f,         -0.0f};
  for (const char* from : {"float32", "float64"}) {
    const NDArray in =
        Invoke("Cast", {NDArray::FromVector(x, Shape{10}).Copy(kGpu)}, {{"dtype", from}})[0];
    const NDArray h = Invoke("Cast", {in}, {{"dtype", "float16"}})[0];
    const std::vector<float> back =
        Invoke("Cast", {h}, {{"dtype", "float32"}})[0].ToVector<float>();
    EXPECT_EQ(back, want) << from;
    EXPECT_TRUE(std::signbit(back[9])) << from;
  }
  // 1 + 2^-11 + 2^-40 is above the tie in float64: one rounding goes up, two would go to 1
  const NDArray d = NDArray::FromVector(std::vector<double>{1 + 0x1p-11 + 0x1p-40}, Shape{1});
  const NDArray h = Invoke("Cast", {d.Copy(kGpu)}, {{"dtype", "float16"}})[0];
  EXPECT_EQ(Invoke("Cast", {h}, {{"dtype", "float32"}})[0].ToVector<float>()[0], 1 + 0x1p-10f);
  const NDArray nan = NDArray::FromVector(std::vector<float>{std::nanf("")}, Shape{1}).Copy(kGpu);
  const NDArray hn = Invoke("Cast", {nan}, {{"dtype", "float16"}})[0];
  EXPECT_TRUE(std::isnan(Invoke("Cast", {hn}, {{"dtype", "float32"}})[0].ToVector<float>()[0]));
}

}  // namespace
}  // namespace weft
