#include "bench/dist_gpu_rows.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "dist/gpu/nccl_lib.h"
#include "weft/weft.h"

namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
using weft::gpu::Nccl;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The benchmark's own NCCL communicator of one rank on gpu:0, with a stream.
struct RawNccl {
  RawNccl() {
    ncclUniqueId id;
    WEFT_NCCL_CHECK(Nccl().GetUniqueId(&id));
    WEFT_CUDA_CHECK(cudaSetDevice(0));
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    WEFT_NCCL_CHECK(Nccl().CommInitRank(&comm, 1, id, 0));
  }
  ~RawNccl() {
    Nccl().CommDestroy(comm);
    cudaStreamDestroy(stream);
  }
  // An all-reduce in place of each buffer, then a wait: seconds per call.
  double AllReduce(const std::vector<float*>& buffers, size_t n) {
    const auto start = Clock::now();
    for (float* data : buffers) WEFT_NCCL_CHECK(Nccl().AllReduce(data, data, n, ncclFloat32, ncclSum, comm, stream));
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return Seconds(start) / buffers.size();
  }
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

// weft's all-reduce in place of each array, then a wait for them all: seconds per call.
double WeftAllReduce(weft::dist::Communicator& world, std::vector<weft::NDArray>& arrays) {
  const auto start = Clock::now();
  for (weft::NDArray& a : arrays) world.AllReduce(a, weft::dist::ReduceOp::kSum);
  for (weft::NDArray& a : arrays) a.WaitToRead();
  return Seconds(start) / arrays.size();
}

}  // namespace

// Two pairs of columns: one call and its wait (the engine's round trip of one GPU op: push, comm
// worker, event, wake-up), and one call on each of 16 arrays before the waits (a training step's
// buckets; fewer above 4 MB, 64 MB in all), each against the raw call(s) and a stream synchronize.
void NcclRows(weft::dist::Communicator& world, int reps) {
  if (weft::gpu::GpuCount() == 0) {
    std::printf("nccl: no GPU (%s)\n", weft::gpu::NoGpuReason().c_str());
    return;
  }
  constexpr int kArrays = 16;
  std::printf("%-8s %9s %9s %7s %13s %13s %7s   (gpu:0, %s, %s)\n", "nccl", "weft us", "raw us", "ratio",
              "row: weft us", "row: raw us", "ratio", world.Describe().c_str(), Nccl().path.c_str());
  RawNccl raw;
  for (size_t bytes = 1024; bytes <= (size_t{64} << 20); bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    const int count = static_cast<int>(std::min<size_t>(kArrays, (size_t{64} << 20) / bytes));  // 64 MB at most
    std::vector<weft::NDArray> arrays;
    std::vector<float*> buffers;
    for (int k = 0; k < count; ++k) {
      arrays.emplace_back(weft::Shape{n}, weft::Device::Gpu(0));
      arrays.back().Fill(1);
      arrays.back().WaitToRead();
      buffers.push_back(static_cast<float*>(arrays.back().View().raw()));
    }
    std::vector<weft::NDArray> first(arrays.begin(), arrays.begin() + 1);
    const std::vector<float*> first_buffer(buffers.begin(), buffers.begin() + 1);
    std::vector<double> w, r, wr, rr;
    for (int k = 0; k < reps + 1; ++k) {  // round 0 warms up
      const double one = WeftAllReduce(world, first), raw_one = raw.AllReduce(first_buffer, static_cast<size_t>(n));
      const double row = WeftAllReduce(world, arrays), raw_row = raw.AllReduce(buffers, static_cast<size_t>(n));
      if (k == 0) continue;
      w.push_back(one), r.push_back(raw_one), wr.push_back(row), rr.push_back(raw_row);
    }
    const double ws = Median(w) * 1e6, rs = Median(r) * 1e6, wrs = Median(wr) * 1e6, rrs = Median(rr) * 1e6;
    const std::string size =
        bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB" : std::to_string(bytes >> 10) + " KB";
    std::printf("%-8s %9.1f %9.1f %7.2f %13.2f %13.2f %7.2f\n", size.c_str(), ws, rs, ws / rs, wrs, rrs, wrs / rrs);
  }
}

}  // namespace bench
