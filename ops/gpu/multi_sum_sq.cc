// multi_sum_sq on the GPU (ops/optimizer/multi_sum_sq.cc says what it computes), float32, float64
// and bfloat16: per kGpuMaxSumSq arrays, one launch over their chunks and one that adds each
// array's chunks in order (kernels/multi_sum_sq.cuh), the partial sums in the call's workspace.
// A trainer's step clips every parameter's gradient with a few launches instead of two per
// parameter.
#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/launch.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// in: num_args arrays of one dtype; out: (num_args,).
void MultiSumSqGpu(const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                   std::span<const OpReq> req, std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const std::string t = KernelType("multi_sum_sq", kElementwiseTypes, in, out);
  std::vector<GpuSumSqArgs> launches;
  for (size_t first = 0; first < in.size(); first += kGpuMaxSumSq) {
    GpuSumSqArgs a{};
    a.count = static_cast<int>(std::min<size_t>(kGpuMaxSumSq, in.size() - first));
    for (int k = 0; k < a.count; ++k) {
      a.in[k] = in[first + k].raw();
      a.size[k] = in[first + k].size();
      a.first_chunk[k + 1] = a.first_chunk[k] + (a.size[k] + kGpuSumSqChunk - 1) / kGpuSumSqChunk;
    }
    launches.push_back(a);
  }
  int64_t most = 0;
  for (const GpuSumSqArgs& a : launches) most = std::max<int64_t>(most, a.first_chunk[a.count]);
  // float partials for float32 and bfloat16, double for float64: 8 bytes each at most
  void* partials = GpuCall(ctx).Workspace({static_cast<size_t>(std::max<int64_t>(most, 1) * 8)})[0];
  for (size_t l = 0; l < launches.size(); ++l) {
    const GpuSumSqArgs& a = launches[l];
    if (a.first_chunk[a.count] > 0) {
      void* args[] = {const_cast<GpuSumSqArgs*>(&a), &partials};
      LaunchArgs(ctx, "multi_sum_sq.cuh", Instance("weft::MultiSumSqChunks", {t}),
                 a.first_chunk[a.count], /*block_per_item=*/true, args);
    }
    void* at = static_cast<char*>(out[0].raw()) + l * kGpuMaxSumSq * DTypeSize(out[0].dtype());
    Launch(ctx, "multi_sum_sq.cuh", Instance("weft::MultiSumSqFinish", {t}), a.count, a, partials,
           at, ReqCode(req[0]));
  }
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kGpu, {{"multi_sum_sq", {.compute = MultiSumSqGpu}}});

}  // namespace
}  // namespace weft::gpu
