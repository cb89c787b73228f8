// The GPU draws exactly the CPU's random numbers: core/philox.h compiled by NVRTC (philox.cuh)
// against storage/random.cc's PhiloxStream, number for number, and so Dropout's mask on the GPU
// equals the CPU's for the same RandomKey.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "ops/gpu/rtc/kernel_library.h"
#include "storage/random.h"
#include "tests/gpu_op_test_util.h"

namespace weft {
namespace {

using testing::DeviceBuffer;
using testing::OpCall;
using testing::RunCompute;
using testing::TestStream;

// The first n numbers of `key`'s range, drawn on GPU 0.
std::vector<uint32_t> GpuNumbers(RandomKey key, long long n) {
  const gpu::rtc::Kernel kernel =
      gpu::rtc::KernelLibrary::Global().Get({"philox.cuh", "", "weft::PhiloxRaw", {}}, 0);
  DeviceBuffer out(n * sizeof(uint32_t));
  unsigned long long seed = key.seed, offset = key.offset;
  void* out_ptr = out.get();
  void* args[] = {&seed, &offset, &out_ptr, &n};
  TestStream stream;
  kernel.Launch(dim3(8), dim3(256), args, stream.get());
  stream.Synchronize();
  std::vector<uint32_t> numbers(n);
  out.Download(numbers.data(), n * sizeof(uint32_t));
  return numbers;
}

TEST(Philox, GpuDrawsTheCpuNumbers) {
  const RandomKey keys[] = {
      {0, 0},
      {42, 0},
      {42, 7},
      {0xdeadbeefcafef00dull, 0xfffffffeull},  // the counter's low word carries into its high word
      {0x0123456789abcdefull, 0x123456789ull},
  };
  for (const RandomKey key : keys) {
    const long long n = 4099;
    const std::vector<uint32_t> gpu = GpuNumbers(key, n);
    PhiloxStream cpu(key);
    for (long long i = 0; i < n; ++i) {
      ASSERT_EQ(gpu[i], cpu.NextU32())
          << "number " << i << " of seed " << key.seed << " offset " << key.offset;
    }
  }
}

// Dropout on both devices from one key: the same mask and result, bit for bit.
void ExpectSameDropout(const Shape& shape, double p, RandomKey key, std::vector<OpReq> req) {
  const int64_t n = shape.Size();
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = 0.25f + static_cast<float>(i % 97) * 0.125f;
  const OpCall call{"Dropout", {{"p", std::to_string(p)}}, {shape}, /*is_train=*/true, key};
  std::vector<std::vector<float>> cpu_in = {x}, gpu_in = {x};
  std::vector<std::vector<float>> cpu_out = {std::vector<float>(n, 1.0f),
                                             std::vector<float>(n, 2.0f)};
  std::vector<std::vector<float>> gpu_out = cpu_out;
  RunCompute(call, Device::Cpu(), DType::kFloat32, cpu_in, req, cpu_out);
  RunCompute(call, Device::Gpu(0), DType::kFloat32, gpu_in, req, gpu_out);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(gpu_out[1][i], cpu_out[1][i]) << "mask at " << i;
    ASSERT_EQ(gpu_out[0][i], cpu_out[0][i]) << "result at " << i;
    kept += cpu_out[1][i] != 0;
  }
  if (req[1] == OpReq::kWrite) {  // the mask is really random: about 1 - p kept
    EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 0.05);
  }
}

TEST(Philox, GpuDropoutMaskEqualsTheCpuMask) {
  ExpectSameDropout(Shape{37, 29}, 0.3, {1234, 0},
                    {OpReq::kWrite, OpReq::kWrite});  // 1073: a partial last block
  ExpectSameDropout(Shape{4096}, 0.5, {99, 1ull << 33},
                    {OpReq::kWrite, OpReq::kWrite});  // packs of four
  ExpectSameDropout(Shape{1001}, 0.9, {7, 3}, {OpReq::kAddTo, OpReq::kAddTo});
  ExpectSameDropout(Shape{1001}, 0.1, {7, 3}, {OpReq::kWrite, OpReq::kNull});
}

TEST(Philox, GpuDropoutOutsideTrainingIsTheIdentity) {
  const int64_t n = 1000;
  const OpCall call{"Dropout", {{"p", "0.5"}}, {Shape{n}}};
  std::vector<std::vector<float>> in = {std::vector<float>(n, 3.0f)};
  std::vector<std::vector<float>> out = {std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
  RunCompute(call, Device::Gpu(0), DType::kFloat32, in, {OpReq::kWrite, OpReq::kWrite}, out);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(out[0][i], 3.0f);
    ASSERT_EQ(out[1][i], 1.0f);
  }
}

}  // namespace
}  // namespace weft
