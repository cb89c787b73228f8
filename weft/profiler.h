// Profiling the steps a program chooses: Start begins a trace, Stop writes it. The trace (Chrome
// trace event JSON; open it in Perfetto, https://ui.perfetto.dev, or chrome://tracing) holds every
// op that started in between, as a span on the track of the engine worker that ran it; in a CUDA
// build also every kernel, memcpy and memset, on a track per stream named after its worker
// ("gpu:0 compute 1", "gpu:0 copy h2d"), with an arrow from the op that queued it; and the memory
// pools' bytes in use and cached over time ("memory cpu", "memory gpu:0", "memory pinned host").
// WEFT_PROFILE=<file> traces a whole run instead, from the engine's start to its shutdown.
//
//   weft::Profiler::Start("step.json");
//   exec->Forward(/*is_train=*/true);
//   exec->Backward();
//   weft::Profiler::Stop();   // waits for the work pushed so far, then writes step.json
#pragma once

#include <string>

namespace weft {

class Profiler {
 public:
  // Throws weft::Error when a profiler already runs (Start without Stop, or WEFT_PROFILE).
  static void Start(const std::string& path);
  // Waits for the work pushed so far (its errors stay for the next wait on its arrays), then
  // writes the trace: through a temporary file renamed into place, so a failure leaves no
  // half-written file. Throws weft::Error when none runs, when called inside an engine op, or
  // when the file cannot be written (the profiler stops anyway).
  static void Stop();
  static bool Running();
};

}  // namespace weft
