#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/dist_gpu_rows.h"
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
  double AllReduce(float* data, size_t n) {
    const auto start = Clock::now();
    WEFT_NCCL_CHECK(Nccl().AllReduce(data, data, n, ncclFloat32, ncclSum, comm, stream));
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return Seconds(start);
  }
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

}  // namespace

void NcclRows(weft::dist::Communicator& world, int reps) {
  if (weft::gpu::GpuCount() == 0) {
    std::printf("nccl: no GPU (%s)\n", weft::gpu::NoGpuReason().c_str());
    return;
  }
  std::printf("%-10s %10s %14s %8s   (gpu:0, %s, %s)\n", "nccl", "weft us", "ncclAllReduce", "ratio",
              world.Describe().c_str(), Nccl().path.c_str());
  RawNccl raw;
  for (size_t bytes = 1024; bytes <= (size_t{64} << 20); bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    weft::NDArray a(weft::Shape{n}, weft::Device::Gpu(0));
    a.Fill(1);
    a.WaitToRead();
    float* data = static_cast<float*>(a.View().raw());
    std::vector<double> w, r;
    for (int k = 0; k < reps + 1; ++k) {  // round 0 warms up
      const auto start = Clock::now();
      world.AllReduce(a, weft::dist::ReduceOp::kSum);
      a.WaitToRead();
      const double weft_s = Seconds(start);
      const double raw_s = raw.AllReduce(data, static_cast<size_t>(n));
      if (k == 0) continue;
      w.push_back(weft_s);
      r.push_back(raw_s);
    }
    const double ws = Median(w) * 1e6, rs = Median(r) * 1e6;
    const std::string size = bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB" : std::to_string(bytes >> 10) + " KB";
    std::printf("%-10s %10.1f %14.1f %8.2f\n", size.c_str(), ws, rs, ws / rs);
  }
}

}  // namespace bench
