// Attention's GPU kernels (ops/gpu/kernels/attention.cuh and attention_tiled.cuh)
// compiled by NVRTC for sm_90, every kernel in every type the op launches it with, and the tiling
// the host and the kernels share (kernels/attention_tiles.cuh). NVRTC needs no GPU: this runs in
// the CUDA build anywhere.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/gpu/kernels/attention_tiles.cuh"
#include "ops/gpu/rtc/compile.h"

namespace weft::gpu {
namespace {

// Explicit instantiations of every kernel the op launches for stored type t, arithmetic (and
// lse) type a, and `per_thread` accumulators per thread.
std::string Instances(const std::string& t, const std::string& a, const std::string& m,
                      int per_thread) {
  const std::string in = "const " + t + "*", out = t + "*", stat = "const " + a + "*";
  const std::string mask = "const " + m + "*";
  const std::string args = "<" + t + ", " + a + ", " + m + ", " + std::to_string(per_thread) + ">(";
  return "template __global__ void weft::AttnForward" + args + in + ", " + in + ", " + in + ", " +
         mask + ", " + out + ", " + a +
         "*, weft::GpuAttention, weft::GpuAttnDropout, int, int);\n" +
         "template __global__ void weft::AttnQueryGrad" + args + in + ", " + in + ", " + in + ", " +
         in + ", " + mask + ", " + stat + ", " + stat + ", " + out +
         ", weft::GpuAttention, weft::GpuAttnDropout, int);\n" +
         "template __global__ void weft::AttnKeyGrad" + args + in + ", " + in + ", " + in + ", " +
         in + ", " + mask + ", " + stat + ", " + stat + ", " + out + ", " + out +
         ", weft::GpuAttention, weft::GpuAttnDropout, int, int);\n";
}

// Every kernel in every type the op launches it with (float32, float64, bfloat16 with float
// arithmetic), compiled as one program (each NVRTC run costs seconds). The accumulator count is
// the narrowest: wider ones are the same code unrolled further (and take longer to compile).
TEST(AttentionKernels, EveryKernelCompilesForEachTypeAndWidth) {
  std::string source = "#include \"attention.cuh\"\n";
  for (const auto& [t, a] : std::vector<std::pair<std::string, std::string>>{
           {"float", "float"}, {"double", "double"}, {"weft::bf16", "float"}}) {
    source += Instances(t, a, t, kAttnPerLane);                // additive masks
    source += Instances(t, a, "unsigned char", kAttnPerLane);  // boolean masks
    if (t == "float") continue;  // AttnDelta<float, float> is the name compiled
    source += "template __global__ void weft::AttnDelta<" + t + ", " + a + ">(const " + t +
              "*, const " + t + "*, " + a + "*, weft::GpuAttention);\n";
  }
  const rtc::CompileResult r = rtc::CompileToCubin(
      "attention_test.cu", source, "weft::AttnDelta<float, float>", rtc::CompileOptions(90, {}));
  EXPECT_TRUE(r.cubin) << r.log << "\n--- source ---\n" << source;
}

// attention_tiled.cuh's kernels (heads of at most 64 columns) for every data type they are
// launched with, the arithmetic float, with additive and boolean masks.
TEST(AttentionKernels, TheTiledKernelsCompileForEachTypeAndMask) {
  std::string source = "#include \"attention_tiled.cuh\"\n";
  for (const std::string t : {"float", "weft::bf16", "weft::f16"}) {
    for (const std::string m : {t, std::string("unsigned char")}) {
      const std::string in = "const " + t + "*, ", mask = "const " + m + "*, ";
      const std::string stats = "const float*, const float*, ", args = "<" + t + ", " + m + ">(";
      source += "template __global__ void weft::AttnForwardTiled" + args + in + in + in + mask + t +
                "*, float*, weft::GpuAttention, weft::GpuAttnDropout, int, int);\n";
      source += "template __global__ void weft::AttnQueryGradTiled" + args + in + in + in + in +
                mask + stats + t + "*, weft::GpuAttention, weft::GpuAttnDropout, int);\n";
      source += "template __global__ void weft::AttnKeyGradTiled" + args + in + in + in + in +
                mask + stats + t + "*, " + t +
                "*, weft::GpuAttention, weft::GpuAttnDropout, int, int);\n";
    }
  }
  const rtc::CompileResult r =
      rtc::CompileToCubin("attention_tiled_test.cu", source, "weft::AttnForwardTiled<float, float>",
                          rtc::CompileOptions(90, {}));
  EXPECT_TRUE(r.cubin) << r.log << "\n--- source ---\n" << source;
}

TEST(AttentionKernels, AccumulatorsPerThreadCoverTheColumns) {
  EXPECT_EQ(AttnPerThread(1), 4);
  EXPECT_EQ(AttnPerThread(32), 4);
  EXPECT_EQ(AttnPerThread(33), 8);
  EXPECT_EQ(AttnPerThread(64), 8);
  EXPECT_EQ(AttnPerThread(100), 16);
  EXPECT_EQ(AttnPerThread(256), 32);
  EXPECT_EQ(AttnPerThread(1000), 32);  // in 4 chunks of 256 columns
  for (long long cols : {1, 7, 32, 33, 64, 65, 96, 128, 200, 256, 257, 1000}) {
    const int per_thread = AttnPerThread(cols);
    EXPECT_GE(AttnChunks(cols, per_thread) * per_thread * kAttnLanes, cols) << cols;
    EXPECT_TRUE(AttnChunks(cols, per_thread) == 1 || per_thread == kAttnMaxPerThread) << cols;
  }
}

TEST(AttentionKernels, ItemsCoverEveryRowTileAndColumnChunk) {
  // B * H = 6 pairs of 70 rows (3 tiles) and 300 columns (2 chunks of 256).
  EXPECT_EQ(AttnTiles(70), 3);
  EXPECT_EQ(AttnChunks(300, AttnPerThread(300)), 2);
  EXPECT_EQ(AttnItems(6, 70, 300, AttnPerThread(300)), 6 * 3 * 2);
  EXPECT_EQ(AttnItems(96, 1024, 64, AttnPerThread(64)), 96 * 32);
}

}  // namespace
}  // namespace weft::gpu
