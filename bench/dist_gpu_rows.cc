#include "bench/dist_gpu_rows.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/gpu/cuda_check.h"
#include "distributed/gpu/nccl_lib.h"
#include "weft/weft.h"

namespace bench {
namespace {

using Clock = std::chrono::steady_clock;
using weft::gpu::Nccl;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The benchmark's own NCCL communicator of one rank on gpu:0, with a stream of its own, and a
// compute stream (blocking, as the engine's are) for the ordered call.
struct RawNccl {
  RawNccl() {
    ncclUniqueId id;
    WEFT_NCCL_CHECK(Nccl().GetUniqueId(&id));
    WEFT_CUDA_CHECK(cudaSetDevice(0));
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    WEFT_CUDA_CHECK(cudaStreamCreate(&compute));
    WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    WEFT_NCCL_CHECK(Nccl().CommInitRank(&comm, 1, id, 0));
  }
  ~RawNccl() {
    Nccl().CommDestroy(comm);
    cudaEventDestroy(ready);
    cudaStreamDestroy(compute);
    cudaStreamDestroy(stream);
  }
  // An all-reduce in place of each buffer, then a wait: seconds per call. `ordered`: each call
  // first waits for an event recorded on the compute stream, as a collective on a communication
  // stream of its own must (what weft's op and PyTorch's DDP do).
  double AllReduce(const std::vector<float*>& buffers, size_t n, bool ordered = false) {
    const auto start = Clock::now();
    for (float* data : buffers) {
      if (ordered) {
        WEFT_CUDA_CHECK(cudaEventRecord(ready, compute));
        WEFT_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
      }
      WEFT_NCCL_CHECK(Nccl().AllReduce(data, data, n, ncclFloat32, ncclSum, comm, stream));
    }
    WEFT_CUDA_CHECK(cudaStreamSynchronize(stream));
    return Seconds(start) / buffers.size();
  }
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr, compute = nullptr;
  cudaEvent_t ready = nullptr;
};

// weft's all-reduce in place of each array, then a wait for them all: seconds per call.
double WeftAllReduce(weft::dist::Communicator& world, std::vector<weft::NDArray>& arrays) {
  const auto start = Clock::now();
  for (weft::NDArray& a : arrays) world.AllReduce(a, weft::dist::ReduceOp::kSum);
  for (weft::NDArray& a : arrays) a.WaitToRead();
  return Seconds(start) / arrays.size();
}

}  // namespace

// Two groups of columns: one call and its wait (the engine's round trip of one GPU op: push,
// compute worker, events, wake-up), and one call on each of 16 arrays before the waits (a
// training step's buckets; fewer above 4 MB, 64 MB in all), each against the raw call(s) and a
// stream synchronize, and against the raw call ordered after a compute stream by an event (the
// floor of a communication stream of its own; "ord").
void NcclRows(weft::dist::Communicator& world, int reps) {
  if (weft::gpu::GpuCount() == 0) {
    std::printf("nccl: no GPU (%s)\n", weft::gpu::NoGpuReason().c_str());
    return;
  }
  constexpr int kArrays = 16;
  std::printf("%-8s %8s %7s %7s %6s %6s %10s %9s %9s %6s %6s   (gpu:0, %s, %s)\n", "nccl",
              "weft us", "raw us", "ord us", "ratio", "/ord", "row: weft", "row: raw", "row: ord",
              "ratio", "/ord", world.Describe().c_str(), Nccl().path.c_str());
  RawNccl raw;
  for (size_t bytes = 1024; bytes <= (size_t{64} << 20); bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    const int count =
        static_cast<int>(std::min<size_t>(kArrays, (size_t{64} << 20) / bytes));  // 64 MB at most
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
    std::vector<double> w, r, o, wr, rr, orr;
    const size_t count_n = static_cast<size_t>(n);
    for (int k = 0; k < reps + 1; ++k) {  // round 0 warms up
      const double one = WeftAllReduce(world, first),
                   raw_one = raw.AllReduce(first_buffer, count_n),
                   ord_one = raw.AllReduce(first_buffer, count_n, /*ordered=*/true);
      const double row = WeftAllReduce(world, arrays), raw_row = raw.AllReduce(buffers, count_n),
                   ord_row = raw.AllReduce(buffers, count_n, /*ordered=*/true);
      if (k == 0) continue;
      w.push_back(one), r.push_back(raw_one), o.push_back(ord_one);
      wr.push_back(row), rr.push_back(raw_row), orr.push_back(ord_row);
    }
    const double ws = Median(w) * 1e6, rs = Median(r) * 1e6, os = Median(o) * 1e6;
    const double wrs = Median(wr) * 1e6, rrs = Median(rr) * 1e6, ors = Median(orr) * 1e6;
    const std::string size = bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB"
                                                : std::to_string(bytes >> 10) + " KB";
    std::printf("%-8s %8.1f %7.1f %7.1f %6.2f %6.2f %10.2f %9.2f %9.2f %6.2f %6.2f\n", size.c_str(),
                ws, rs, os, ws / rs, ws / os, wrs, rrs, ors, wrs / rrs, wrs / ors);
  }
}

}  // namespace bench
