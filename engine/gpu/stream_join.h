// Library calls whose work, on whatever streams the library forks it to, is ordered before the
// caller's stream's later work.
//
// The engine considers a GPU op done when an event recorded on its worker's stream after the op
// is; so every op must order all the device work it starts before that point. cuDNN's RNN runs
// its kernels on streams of its own, created non-blocking (seen on the H200 with cuDNN 9:
// tests/gpu_cudnn_streams_test.cc), and MXNet found its backward data leaving the last kernel
// unordered with the handle's stream (PR #16391). An event on the legacy default stream does not
// wait for non-blocking streams, so it cannot join them; and where it did, it would also wait for
// every other blocking stream's queued work.
//
// JoinedLibraryWork::Run captures the call into a CUDA graph on the calling thread's recording
// stream (engine/gpu/recorded_work.h) and launches the graph on the caller's stream. A graph
// launched on a stream is done, every node of it, before the stream's later work starts; the
// capture follows the library's fork (its event waits) onto its own streams and puts that work in
// the graph; and a fork the library does not join back makes the capture fail
// (cudaErrorStreamCaptureUnjoined) instead of leaving work behind. So nothing the call queues
// after a fork can overtake the caller's next op, whatever flags the library's streams have, and
// nothing else on the device is waited for. The executable graph is kept per call site and path
// (a shape of work: which pointers are null, say) and updated in place for the next call
// (cudaGraphExecUpdate, a few microseconds per node), or instantiated again when its topology
// changed.
//
// A library that leaves a fork unjoined: one warning; the call runs again uncaptured on the
// caller's stream, followed by cudaDeviceSynchronize (the only barrier that covers streams weft
// does not know), so the result is still right. Work a library queues on a stream of its own with
// no event from the caller's stream before it is not captured, and not ordered after the op's
// inputs either: a library bug no caller can repair.
//
//   JoinedLibraryWork& joined = plan.backward_data;  // one per call site, used by one thread at a
//   time joined.Run(stream, path, [&](engine::GpuStream& s) {
//     WEFT_CUDNN_CHECK(WithCudnn(s, [&](cudnnHandle_t h) {   // a handle bound to s
//       return cudnnRNNBackwardData_v8(h, ...);
//     }));
//   });
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "engine/gpu/gpu_stream.h"

namespace weft::gpu {

class JoinedLibraryWork {
 public:
  // The library calls, made with handles bound to the stream they are given.
  using Call = std::function<void(engine::GpuStream& stream)>;

  JoinedLibraryWork() = default;
  JoinedLibraryWork(const JoinedLibraryWork&) = delete;
  JoinedLibraryWork& operator=(const JoinedLibraryWork&) = delete;
  ~JoinedLibraryWork();  // frees the executables once their launches are done

  // Queues `call`'s work so that all of it is done before `stream`'s later work (the file
  // comment). `path` tells apart the shapes of work one call site makes, so that alternating
  // ones each keep their executable. On a stream being recorded into a graph, `call` runs there
  // directly: that capture checks the joins itself. `stream`'s device must be current. Throws
  // what `call` throws, or weft::Error on a CUDA error.
  void Run(engine::GpuStream& stream, uint32_t path, const Call& call);

 private:
  cudaGraphExec_t& ExecFor(uint32_t path);
  void Launch(engine::GpuStream& stream, cudaGraphExec_t& exec, cudaGraph_t graph);

  int device_ = -1;
  std::vector<std::pair<uint32_t, cudaGraphExec_t>> execs_;
};

// Counts over the process, for tests and benchmarks.
struct JoinCounts {
  int64_t runs = 0;            // Run calls that captured and launched a graph
  int64_t instantiations = 0;  // graphs instantiated (the rest were updated in place)
  int64_t unjoined = 0;        // calls whose library left a fork unjoined (the fallback ran)
};
JoinCounts Joins();

}  // namespace weft::gpu
