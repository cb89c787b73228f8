// The GPU computes of the tensor ops (ops/gpu: reduce, shape, concat_slice, embedding) against
// their CPU computes, on shapes chosen to take every kernel path: reductions by groups of 1, 32
// and 256 threads per output and by column tiles, whole or cut into slices, with ties and NaNs for
// max (whose gradient goes to the first maximum), tiled and strided transposes, copies of whole
// rows and of boxes, and Embedding's out-of-range indices (an error naming the first, as on the
// CPU). Each with the requests kWrite and kAddTo. The small cases of tests/ops_tensor_test.cc run
// on the GPU through the op tests' GPU build.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "tests/gpu_op_test_util.h"
#include "tests/weft_test_util.h"

namespace weft {
namespace {

using testing::FromBf16;
using testing::OpCall;
using testing::RunCompute;
using testing::ToBf16;

// What an input holds: multiples of 1/8 in [-2, 2) (so that sums are exact in float32 whatever
// their order, and GPU and CPU agree to the bit), or few distinct values (ties), or those with a
// NaN now and then, or class indices in [0, bound).
enum class Fill { kSpread, kTies, kTiesAndNaN, kIndices };

struct TensorCase {
  std::string op;
  AttrMap attrs;
  std::vector<Shape> shapes;
  Fill fill = Fill::kSpread;
  int filled_input = 0;  // the input `fill` is for; the others are spread
  int bound = 0;         // kIndices: indices are below it
};

std::vector<float> Generate(int64_t n, int seed, Fill fill, int bound, bool bf16) {
  std::vector<float> v(n);
  uint32_t state = 88172645u + 7919u * seed;
  for (float& x : v) {
    state ^= state << 13, state ^= state >> 17, state ^= state << 5;
    const float u = static_cast<float>(state >> 8) / 16777216.0f;
    switch (fill) {
      case Fill::kSpread:
        x = std::floor(32 * u) / 8 - 2;
        break;
      case Fill::kTies:
        x = std::floor(4 * u);
        break;
      case Fill::kTiesAndNaN:
        x = state % 17 == 0 ? NAN : std::floor(4 * u);
        break;
      case Fill::kIndices:
        x = std::floor(bound * u);
        break;
    }
    if (bf16) x = FromBf16(ToBf16(x));
  }
  return v;
}

// Runs `c` on the CPU (float32) and on GPU 0 (`dtype`, from the same bf16-exact values for
// bfloat16) with every output requested as `req`, and compares the outputs.
void ExpectSameOnGpu(const TensorCase& c, DType dtype, OpReq req) {
  const bool bf16 = dtype == DType::kBFloat16;
  const Op& op = GetOp(c.op);
  const std::vector<Shape> out_shapes = InferShapes(op, ParseAttrs(op, c.attrs), c.shapes);
  std::vector<std::vector<float>> in, out;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    const Fill fill = static_cast<int>(i) == c.filled_input ? c.fill : Fill::kSpread;
    in.push_back(Generate(c.shapes[i].Size(), i, fill, c.bound, bf16));
  }
  for (size_t i = 0; i < out_shapes.size(); ++i)
    out.push_back(Generate(out_shapes[i].Size(), 30 + i, Fill::kSpread, 0, bf16));
  std::vector<std::vector<float>> cpu_in = in, gpu_in = in, cpu_out = out, gpu_out = out;
  const std::vector<OpReq> reqs(out.size(), req);
  const OpCall call{c.op, c.attrs, c.shapes};
  RunCompute(call, Device::Cpu(), DType::kFloat32, cpu_in, reqs, cpu_out);
  RunCompute(call, Device::Gpu(0), dtype, gpu_in, reqs, gpu_out);
  const float tolerance = bf16 ? 1.6e-2f : 2e-5f;
  for (size_t o = 0; o < out.size(); ++o) {
    for (size_t i = 0; i < out[o].size(); ++i) {
      const float g = gpu_out[o][i], want = cpu_out[o][i];
      if (std::isnan(g) && std::isnan(want)) continue;
      ASSERT_LE(std::abs(g - want), tolerance * std::max(1.0f, std::abs(want)))
          << c.op << " " << c.shapes[0] << (bf16 ? " bfloat16" : " float32")
          << (req == OpReq::kAddTo ? " add-to" : " write") << ": output " << o << " at " << i
          << ", gpu " << g << ", cpu " << want;
    }
  }
}

void ExpectSameOnGpu(const std::vector<TensorCase>& cases,
                     std::vector<DType> dtypes = {DType::kFloat32}) {
  for (const TensorCase& c : cases) {
    for (DType dtype : dtypes) {
      for (OpReq req : {OpReq::kWrite, OpReq::kAddTo}) ExpectSameOnGpu(c, dtype, req);
    }
  }
}

Shape OutShape(const std::string& op, const AttrMap& attrs, const std::vector<Shape>& in) {
  return InferShapes(GetOp(op), ParseAttrs(GetOp(op), attrs), in)[0];
}

// (shape, axis attribute) pairs that take each reduction kernel.
const std::vector<std::pair<Shape, std::string>> kReductions = {
    {Shape{3, 5000}, "(1,)"},         // a block per output
    {Shape{70, 100}, "(1,)"},         // a warp per output
    {Shape{40, 9}, "(-1,)"},          // a thread per output
    {Shape{5000, 3}, "(0,)"},         // a block per output, reads 3 apart
    {Shape{40, 64}, "(0,)"},          // column tiles
    {Shape{300, 3, 40}, "(0, 1)"},    // column tiles, the last one partial
    {Shape{20, 100000}, "(0,)"},      // a thread per output (many outputs)
    {Shape{4, 50, 6, 70}, "(1, 3)"},  // two reduced axes apart
    {Shape{20, 3000}, ""},            // everything, to a scalar: in 29 slices
    {Shape{8192, 96}, "(0,)"},        // column tiles, few: each in 4 slices of rows
    {Shape{10001, 40}, "(0,)"},       // the same, the last slice shorter
    {Shape{3, 70, 4, 80}, "(1, 3)"},  // a block per output, in 2 slices, two axes apart
    {Shape{2, 0, 3}, "(1,)"},         // an empty axis: sum 0, mean NaN (max: a shape error)
};

TEST(GpuTensorOps, ReductionsMatchCpu) {
  std::vector<TensorCase> cases;
  for (const char* op : {"sum", "mean", "max"}) {
    for (const auto& [shape, axis] : kReductions) {
      if (shape.Size() == 0 && std::string(op) == "max") continue;
      const AttrMap attrs = axis.empty() ? AttrMap{} : AttrMap{{"axis", axis}};
      cases.push_back({op, attrs, {shape}});
      cases.push_back(
          {std::string("_backward_") + op, attrs, {OutShape(op, attrs, {shape}), shape}});
    }
  }
  ExpectSameOnGpu(cases);
}

TEST(GpuTensorOps, ReductionsInBfloat16MatchCpu) {
  std::vector<TensorCase> cases;
  for (const char* op : {"sum", "mean", "max"}) {
    for (const auto& [shape, axis] : kReductions) {
      if (shape.Size() > 0)
        cases.push_back({op, axis.empty() ? AttrMap{} : AttrMap{{"axis", axis}}, {shape}});
    }
  }
  ExpectSameOnGpu(cases, {DType::kBFloat16});
}

TEST(GpuTensorOps, MaxAndItsGradientPickTheFirstMaximumAmongTiesAndNaNs) {
  std::vector<TensorCase> cases;
  for (Fill fill : {Fill::kTies, Fill::kTiesAndNaN}) {
    for (const auto& [shape, axis] : kReductions) {
      if (shape.Size() == 0) continue;
      const AttrMap attrs =
          axis.empty() ? AttrMap{} : AttrMap{{"axis", axis}, {"keepdims", "true"}};
      cases.push_back({"max", attrs, {shape}, fill});
      cases.push_back({"_backward_max",
                       attrs,
                       {OutShape("max", attrs, {shape}), shape},
                       fill,
                       /*filled_input=*/1});
    }
  }
  ExpectSameOnGpu(cases);
}

TEST(GpuTensorOps, TransposesMatchCpu) {
  const std::vector<std::pair<Shape, std::string>> transposes = {
      {Shape{1000, 700}, ""},           // tiles, partial at both edges
      {Shape{3, 37, 45}, "(0, 2, 1)"},  // a batch of tiles
      {Shape{5, 6, 7, 8}, "(3, 1, 0, 2)"},
      {Shape{64, 3}, ""},                     // too narrow for tiles: strided
      {Shape{8, 16, 4, 32}, "(0, 2, 1, 3)"},  // the innermost axis stays: 16-byte packs
      {Shape{16, 24, 64}, "(1, 0, 2)"},       // (T, B*H, D) to (B*H, T, D): packs
      {Shape{6, 5, 7}, "(1, 0, 2)"},          // a run of 7: not whole packs, strided
      {Shape{33, 1, 70}, "(2, 1, 0)"},
  };
  std::vector<TensorCase> cases;
  for (const auto& [shape, axes] : transposes)
    cases.push_back({"transpose", axes.empty() ? AttrMap{} : AttrMap{{"axes", axes}}, {shape}});
  ExpectSameOnGpu(cases, {DType::kFloat32, DType::kBFloat16});
}

TEST(GpuTensorOps, ReshapesMatchCpu) {
  ExpectSameOnGpu({{"reshape", {{"shape", "(0, -1)"}}, {Shape{20, 30, 4}}},
                   {"expand_dims", {{"axis", "1"}}, {Shape{20, 33}}},
                   {"flatten", {}, {Shape{20, 3, 11}}},
                   {"reshape_like", {}, {Shape{20, 6}, Shape{30, 4}}}});
}

TEST(GpuTensorOps, ConcatAndSliceMatchCpu) {
  std::vector<TensorCase> cases;
  const std::vector<std::pair<std::vector<Shape>, int>> concats = {
      {{Shape{50, 30}, Shape{50, 1}, Shape{50, 20}}, 1},
      {{Shape{10, 30}, Shape{20, 30}}, 0},                     // whole blocks
      {{Shape{4, 5, 6}, Shape{4, 0, 6}, Shape{4, 7, 6}}, -2},  // an empty part
  };
  for (const auto& [parts, dim] : concats) {
    const AttrMap attrs = {{"num_args", std::to_string(parts.size())},
                           {"dim", std::to_string(dim)}};
    cases.push_back({"concat", attrs, parts});
    std::vector<Shape> backward = {OutShape("concat", attrs, parts)};
    backward.insert(backward.end(), parts.begin(), parts.end());
    cases.push_back({"_backward_concat", attrs, backward});
  }
  const std::vector<std::tuple<Shape, std::string, std::string>> slices = {
      {Shape{30, 40, 50}, "(1, -30)", "(29, -1)"},  // a box: strided
      {Shape{30, 40, 50}, "(-20,)", "(30,)"},       // whole rows: one copy
      {Shape{300, 60}, "(0, 7)", "(300, 59)"},      // rows of rows: a 2-D copy
  };
  for (const auto& [shape, begin, end] : slices) {
    const AttrMap attrs = {{"begin", begin}, {"end", end}};
    cases.push_back({"slice", attrs, {shape}});
    cases.push_back({"_backward_slice", attrs, {OutShape("slice", attrs, {shape}), shape}});
  }
  ExpectSameOnGpu(cases, {DType::kFloat32, DType::kBFloat16});
}

TEST(GpuTensorOps, EmbeddingMatchesCpu) {
  std::vector<TensorCase> cases;
  for (const auto& [data, input_dim, dim] : std::vector<std::tuple<Shape, int, int>>{
           {Shape{8, 50}, 100, 64}, {Shape{300}, 3, 33}, {Shape{16, 16}, 1000, 2}}) {
    const AttrMap attrs = {{"input_dim", std::to_string(input_dim)},
                           {"output_dim", std::to_string(dim)}};
    cases.push_back(
        {"Embedding", attrs, {data, Shape{input_dim, dim}}, Fill::kIndices, 0, input_dim});
    cases.push_back({"_backward_Embedding",
                     attrs,
                     {OutShape("Embedding", attrs, {data, Shape{input_dim, dim}}), data},
                     Fill::kIndices,
                     1,
                     input_dim});
  }
  ExpectSameOnGpu(cases);
}

// The kernels note bad indices on the device; the first (position 1: 7, where -1, NaN follow) is
// raised once the stream's work is done (TestStream::Synchronize; the engine raises it at the
// wait on the op's outputs), in the CPU's words, on either device.
TEST(GpuTensorOps, EmbeddingIndicesOutOfRangeFailTheOpAsOnTheCpu) {
  const AttrMap attrs = {{"input_dim", "3"}, {"output_dim", "2"}};
  const std::vector<float> indices = {0, 7, -1, NAN, 2.9f};
  for (Device device : {Device::Cpu(), Device::Gpu(0)}) {
    std::vector<std::vector<float>> in = {indices, {1, 2, 3, 4, 5, 6}},
                                    out = {std::vector<float>(10, 9)};
    const std::string forward = testing::ErrorMessage([&] {
      RunCompute({"Embedding", attrs, {Shape{5}, Shape{3, 2}}}, device, DType::kFloat32, in,
                 {OpReq::kWrite}, out);
    });
    EXPECT_NE(
        forward.find(
            "Embedding: index 7 at position 1 of data is out of range: expected 0 <= index < 3 "
            "(input_dim)"),
        std::string::npos)
        << device << ": " << forward;
    in = {std::vector<float>(10, 1), indices};
    out = {std::vector<float>(6, 9)};
    const std::string backward = testing::ErrorMessage([&] {
      RunCompute({"_backward_Embedding", attrs, {Shape{5, 2}, Shape{5}}}, device, DType::kFloat32,
                 in, {OpReq::kWrite}, out);
    });
    EXPECT_NE(backward.find("_backward_Embedding: index 7 at position 1 of data"),
              std::string::npos)
        << device << ": " << backward;
  }
}

}  // namespace
}  // namespace weft
