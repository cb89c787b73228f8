// A gate on a stream, for GPU tests that must force an order between the host and a stream's
// work instead of hoping that a sleep lasts long enough: the gate queues a host function that
// blocks, and with it everything queued on the stream after it, until the test calls Open().
//
//   engine::GpuStream stream(0);
//   testing::StreamGate gate(stream);   // declared after the stream: destroyed (opened) first
//   stream.Memset(p, 0, bytes);          // queued behind the gate: cannot have run
//   ...                                  // what the host must do before the memset runs
//   gate.Open();
//
// Deadlock: nothing the test waits for before Open() may depend on the gated stream: no
// synchronization of it or of its device, no call that blocks until its work is done, and no work
// on the legacy default stream when the gated stream is a blocking one (legacy work waits for every
// blocking stream, and the blocking streams' later work waits for it). A blocked host function may
// also hold the CUDA runtime's callback thread, so nothing waited for before Open() may need
// another host function to run. The destructor opens the gate, so a test that fails before Open()
// still ends.
#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "engine/gpu/gpu_stream.h"

namespace weft::testing {

class StreamGate {
 public:
  explicit StreamGate(engine::GpuStream& stream);
  // On a stream weft does not own (a library's own stream, in a test that plays one).
  explicit StreamGate(cudaStream_t stream);
  ~StreamGate();  // opens the gate
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  // Lets the stream go on past the gate. Idempotent.
  void Open();

 private:
  struct State;
  // The host function: blocks its stream until the gate opens. `holder` is a heap copy of the
  // gate's state pointer, which it frees.
  static void WaitUntilOpen(void* holder);
  // Shared with the host function, which may run (and return) after the gate is destroyed.
  std::shared_ptr<State> state_;
};

}  // namespace weft::testing
