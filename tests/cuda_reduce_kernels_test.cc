// The reduction kernels (ops/gpu/kernels/reduce.cuh: per group, column tiles, packed column tiles,
// any one cut into slices, and the slices' finish), multi_sum_sq's, LayerNorm's (layer_norm.cuh)
// and SoftmaxCrossEntropy's (softmax_cross_entropy.cuh: one pass over a row for its maximum and
// sum), and the scatter-adds of take's and Embedding's gradients (scatter_sum.cuh), compiled by
// NVRTC for sm_90 in every type and accumulator the ops launch them with. NVRTC
// needs no GPU: this runs in the CUDA build anywhere, so a kernel change that does not compile
// fails here, not first on the GPU machine.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ops/gpu/rtc/compile.h"

namespace weft::gpu {
namespace {

// Explicit instantiations of the reduction kernels for stored type t and accumulator acc (the
// gradient form with max's accumulator only, as the ops launch it).
std::string ReduceInstances(const std::string& t, const std::string& acc) {
  const std::string args = "(const " + t + "*, const " + t + "*, " + t +
                           "*, weft::GpuAxes, weft::GpuAxes, long long, long long, long long, "
                           "weft::ReduceSlices, double, int);\n";
  std::vector<std::string> grads = {"false"};
  if (acc == "weft::MaxAcc") grads.push_back("true");
  std::string s;
  for (const char* g : {"1", "32", "256"}) {
    for (const std::string& grad : grads) {
      s += "template __global__ void weft::ReducePerGroup<" + acc + ", " + t + ", " + g + ", " +
           grad + ">" + args;
    }
  }
  for (const std::string& grad : grads)
    s +=
        "template __global__ void weft::ReduceColumns<" + acc + ", " + t + ", " + grad + ">" + args;
  s += "template __global__ void weft::ReduceSlicesFinish<" + acc + ", " + t +
       ">(weft::ReduceSlices, " + t + "*, long long, double, int);\n";
  if (acc == "weft::SumAcc") {
    s += "template __global__ void weft::SumColumnsPacked<" + t + ">(const " + t + "*, " + t +
         "*, long long, long long, long long, weft::ReduceSlices, double, int);\n";
  }
  return s;
}

TEST(ReduceKernels, EveryKernelCompilesForEachTypeAndAccumulator) {
  std::string source = "#include \"reduce.cuh\"\n";
  for (const char* t : {"float", "double", "weft::bf16"}) {
    for (const char* acc : {"weft::SumAcc", "weft::MaxAcc"}) source += ReduceInstances(t, acc);
  }
  const rtc::CompileResult r =
      rtc::CompileToCubin("reduce_test.cu", source, "weft::ReduceSlicesFinish<weft::SumAcc, float>",
                          rtc::CompileOptions(90, {}));
  EXPECT_TRUE(r.cubin) << r.log << "\n--- source ---\n" << source;
}

TEST(SoftmaxCrossEntropyKernels, LossAndGradientCompileForEachTypeAndPackWidth) {
  std::string source = "#include \"softmax_cross_entropy.cuh\"\n";
  // (data, statistics, label, pack width): labels in the data's dtype or float32.
  for (const auto& [t, s, l, v] :
       {std::tuple{"float", "float", "float", 4}, std::tuple{"double", "double", "double", 2},
        std::tuple{"double", "double", "float", 2},
        std::tuple{"weft::bf16", "float", "weft::bf16", 8},
        std::tuple{"weft::bf16", "float", "float", 8},
        std::tuple{"weft::f16", "float", "float", 8}}) {
    for (const int w : {1, v}) {
      const std::string inst =
          std::string("<") + t + ", " + s + ", " + l + ", " + std::to_string(w) + ">";
      const std::string p = std::string("const ") + t + "*", lp = std::string("const ") + l + "*";
      source += "template __global__ void weft::SceLoss" + inst + "(long long, long long, " + p +
                ", " + lp + ", int, " + s + "*, int, " + s + "*, weft::GpuErrorSlot);\n";
      source += "template __global__ void weft::SceGrad" + inst + "(long long, long long, const " +
                s + "*, " + p + ", " + lp + ", const " + s + "*, int, " + t +
                "*, weft::GpuErrorSlot);\n";
    }
  }
  const rtc::CompileResult r = rtc::CompileToCubin(
      "sce_test.cu", source, "weft::SceGrad<float, float, float, 4>", rtc::CompileOptions(90, {}));
  EXPECT_TRUE(r.cubin) << r.log << "\n--- source ---\n" << source;
}

// multi_sum_sq's chunk and finish kernels in every type.
TEST(MultiSumSqKernels, ChunksAndFinishCompileForEachType) {
  std::string source = "#include \"multi_sum_sq.cuh\"\n";
  for (const auto& [t, a] : {std::pair{"float", "float"}, std::pair{"double", "double"},
                             std::pair{"weft::bf16", "float"}}) {
    source += std::string("template __global__ void weft::MultiSumSqChunks<") + t +
              ">(weft::GpuSumSqArgs, " + a + "*);\n";
    source += std::string("template __global__ void weft::MultiSumSqFinish<") + t +
              ">(weft::GpuSumSqArgs, const " + a + "*, " + t + "*, int);\n";
  }
  const rtc::CompileResult r = rtc::CompileToCubin(
      "sumsq_test.cu", source, "weft::MultiSumSqFinish<float>", rtc::CompileOptions(90, {}));
  EXPECT_TRUE(r.cubin) << r.log << "\n--- source ---\n" << source;
}

// LayerNorm's block kernels and its warp kernels for every pack count a row of up to 1024 values
// takes (float: 1 to 8 packs of 4, 16-bit: 1 to 4 of 8), data and output of one type, and float
// data with a 16-bit output (out_dtype); and the backward's parameter sums (LnParamGradSum, not a
// template: compiled with the header).
TEST(LayerNormKernels, BlockAndWarpKernelsCompileForEachTypeAndPackCount) {
  std::string source = "#include \"layer_norm.cuh\"\n";
  struct Types {
    std::string t, u;
    int max_packs;
  };
  for (const Types& k : {Types{"float", "float", 8}, Types{"weft::bf16", "weft::bf16", 4},
                         Types{"weft::f16", "weft::f16", 4}, Types{"float", "weft::bf16", 8},
                         Types{"float", "weft::f16", 8}}) {
    const std::string t = "const " + k.t + "*", u = "const " + k.u + "*", f = "const float*";
    const std::string tu = "<" + k.t + ", " + k.u;
    const std::string fwd =
        "(" + t + ", " + f + ", " + f + ", " + k.u + "*, float*, float*, long long, long long, ";
    const std::string bwd = "(" + u + ", " + t + ", " + f + ", " + f + ", " + f + ", " + k.t +
                            "*, float*, long long, long long, ";
    source += "template __global__ void weft::LnForward" + tu + ">" + fwd +
              "long long, float, int, int, int);\n";
    source += "template __global__ void weft::LnBackward" + tu + ">" + bwd + "long long, int);\n";
    for (int n = 1; n <= k.max_packs; ++n) {
      const std::string inst = tu + ", " + std::to_string(n) + ">";
      source +=
          "template __global__ void weft::LnForwardWarp" + inst + fwd + "float, int, int, int);\n";
      source += "template __global__ void weft::LnBackwardWarp" + inst + bwd + "int);\n";
    }
  }
  const rtc::CompileResult r = rtc::CompileToCubin(
      "ln_test.cu", source, "weft::LnForward<float, float>", rtc::CompileOptions(90, {}));
  EXPECT_TRUE(r.cubin) << r.log << "\n--- source ---\n" << source;
}

// The scatter-adds (take's and Embedding's gradients) in every type, 16-bit ones into float
// buffers, and the store of those buffers (scatter_sum.cuh).
TEST(ScatterSumKernels, GradientsAndTheirStoreCompileForEachType) {
  std::string source = "#include \"take.cuh\"\n#include \"embedding.cuh\"\n";
  source += "#include \"scatter_sum.cuh\"\n";
  for (const auto& [t, a] : {std::pair{"float", "float"}, std::pair{"double", "double"},
                             std::pair{"weft::bf16", "float"}, std::pair{"weft::f16", "float"}}) {
    const std::string p = std::string("const ") + t + "*";
    source += std::string("template __global__ void weft::TakeBackward<") + t + ", long long>(" +
              p + ", const long long*, " + a +
              "*, long long, long long, long long, long long, weft::GpuErrorSlot);\n";
    source += std::string("template __global__ void weft::EmbeddingBackward<") + t + ", int>(" + p +
              ", const int*, " + a + "*, long long, long long, int, weft::GpuErrorSlot);\n";
    if (std::string(a) == "float" && std::string(t) != "float") {
      source += std::string("template __global__ void weft::StoreScatterSum<") + t +
                ">(const float*, " + t + "*, long long, int);\n";
    }
  }
  const rtc::CompileResult r = rtc::CompileToCubin(
      "scatter_test.cu", source, "weft::StoreScatterSum<weft::bf16>", rtc::CompileOptions(90, {}));
  EXPECT_TRUE(r.cubin) << r.log << "\n--- source ---\n" << source;
}

}  // namespace
}  // namespace weft::gpu
