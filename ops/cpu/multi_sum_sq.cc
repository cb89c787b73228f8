// CPU compute of multi_sum_sq (ops/optimizer/multi_sum_sq.cc says what it computes): every input
// cut into chunks of kChunk elements, the chunks of all inputs shared over the threads, each
// chunk's sum of squares in double (a float32 sum of 65,536 squares in one order drifts by 1e-5),
// then each input's chunks added in order: the cut depends on the shapes alone, so the bits do not
// depend on the thread count.
#include <algorithm>
#include <span>
#include <type_traits>
#include <vector>

#include "core/bfloat16.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

constexpr int64_t kChunk = int64_t{1} << 16;

inline float Arith(float x) { return x; }
inline double Arith(double x) { return x; }
inline float Arith(BFloat16 x) { return x.ToFloat(); }

template <typename T>
WEFT_CPU_VECTOR_CLONES double ChunkSumSq(const T* x, int64_t n) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const double v = Arith(x[i]);
    sum += v * v;
  }
  return sum;
}

template <typename T>
void MultiSumSqLoops(std::span<const TensorView> in, OpReq req, T* out) {
  std::vector<int64_t> first(in.size() + 1, 0);  // input i's chunks: [first[i], first[i + 1])
  for (size_t i = 0; i < in.size(); ++i)
    first[i + 1] = first[i] + (in[i].size() + kChunk - 1) / kChunk;
  std::vector<double> partial(first.back());
  ParallelFor(first.back(), 1, [&](int64_t begin, int64_t end) {
    size_t i = std::upper_bound(first.begin(), first.end(), begin) - first.begin() - 1;
    for (int64_t c = begin; c < end; ++c) {
      while (c >= first[i + 1]) ++i;
      const int64_t at = (c - first[i]) * kChunk;
      partial[c] =
          ChunkSumSq(static_cast<const T*>(in[i].raw()) + at, std::min(kChunk, in[i].size() - at));
    }
  });
  for (size_t i = 0; i < in.size(); ++i) {
    double sum = 0;
    for (int64_t c = first[i]; c < first[i + 1]; ++c) sum += partial[c];
    if constexpr (std::is_same_v<T, BFloat16>) {
      const float s = static_cast<float>(sum);
      out[i] = BFloat16::FromFloat(req == OpReq::kAddTo ? out[i].ToFloat() + s : s);
    } else {
      Store(out[i], req, static_cast<T>(sum));
    }
  }
}

// in: num_args arrays of one dtype; out: (num_args,).
void MultiSumSqCompute(const OpContext&, const Attrs&, std::span<const TensorView> in,
                       std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  switch (out[0].dtype()) {
    case DType::kFloat32:
      return MultiSumSqLoops(in, req[0], static_cast<float*>(out[0].raw()));
    case DType::kFloat64:
      return MultiSumSqLoops(in, req[0], static_cast<double*>(out[0].raw()));
    case DType::kBFloat16:
      return MultiSumSqLoops(in, req[0], static_cast<BFloat16*>(out[0].raw()));
    default:
      WEFT_THROW("multi_sum_sq: expected float32, float64 or bfloat16, found " << out[0].dtype());
  }
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu, {
                                                 {"multi_sum_sq", {.compute = MultiSumSqCompute}},
                                             });

}  // namespace
}  // namespace weft::cpu
