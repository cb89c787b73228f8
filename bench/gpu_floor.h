// What a GPU op cannot go below, for gpu_bench's launch-overhead row: the same tiny kernel
// launched straight from this thread onto one stream, and an empty GPU op pushed through the
// engine (no kernel), each in microseconds per call over 10,000 calls.
#pragma once

namespace bench {

double RawLaunchUs(int reps);
double EmptyEngineOpUs(int reps);

}  // namespace bench
