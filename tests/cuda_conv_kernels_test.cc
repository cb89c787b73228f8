// Convolution's own kernels (ops/gpu/kernels/convolution.cuh: the bias, the bias with an
// activation epilogue after a float convolution, the bias gradient) compiled by NVRTC for sm_90 in
// every type, functor and pack width ops/gpu/convolution.cc launches them with. NVRTC needs no
// GPU: this runs in the CUDA build anywhere.
#include <gtest/gtest.h>

#include <string>

#include "ops/gpu/rtc/compile.h"

namespace weft::gpu {
namespace {

TEST(ConvolutionKernels, EveryKernelCompilesForEachTypeFunctorAndWidth) {
  std::string source = "#include \"convolution.cuh\"\n";
  for (const std::string t : {"float", "double", "weft::bf16", "weft::f16"}) {
    source += "template __global__ void weft::ChannelBias<" + t + ">(const " + t + "*, " + t +
              "*, long long, long long, long long, int);\n";
    source += "template __global__ void weft::ChannelSums<" + t + ">(const " + t + "*, " + t +
              "*, long long, long long, long long, int);\n";
  }
  for (const std::string t : {"float", "double"}) {
    for (const std::string f : {"Identity", "Relu", "Relu6", "Gelu", "GeluTanh"}) {
      for (const std::string v : {"1", t == "float" ? "4" : "2"}) {
        source += "template __global__ void weft::ChannelBiasAct<weft::fn::" + f + ", " + t + ", " +
                  v + ">(const " + t + "*, " + t + "*, long long, long long, long long);\n";
      }
    }
  }
  const rtc::CompileResult r = rtc::CompileToCubin(
      "conv_test.cu", source, "weft::ChannelBias<float>", rtc::CompileOptions(90, {}));
  EXPECT_TRUE(r.cubin) << r.log << "\n--- source ---\n" << source;
}

}  // namespace
}  // namespace weft::gpu
