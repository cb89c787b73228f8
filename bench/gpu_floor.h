// What a GPU op cannot go below, for gpu_bench's launch-overhead row: the same tiny kernel
// launched straight from this thread onto one stream, and an empty GPU op pushed through the
// engine (no kernel), each in microseconds per call over 10,000 calls.
#pragma once

namespace bench {

// `blocking_stream`: a stream that synchronizes with the legacy default stream (as weft's
// workers' are) or a non-blocking one.
double RawLaunchUs(int reps, bool blocking_stream);
double EmptyEngineOpUs(int reps);

}  // namespace bench
