// What the GPU RNN (ops/gpu/rnn.cc) shows tests: how many times its backward joined cuDNN's own
// streams back to the op's stream, and how many forwards ran a persistent algorithm. Every
// _backward_RNN call on a GPU joins exactly once, right after cudnnRNNBackwardData_v8 and before
// anything reads its gradients (rnn.cc says why), whether or not the parameters' gradient is
// requested; a test compares these counts before and after a number of calls. Compiled only by
// --config=cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace weft::gpu {

// Joins made by _backward_RNN on any GPU since the process started (all threads).
int64_t RnnBackwardJoins();
// _backward_RNN calls on any GPU since the process started (all threads).
int64_t RnnBackwardCalls();
// RNN forward calls on any GPU that ran one of cuDNN's persistent algorithms (rnn.cc, AlgoFor).
int64_t RnnPersistentForwards();
// The device memory of the random state cuDNN's dropout between layers uses for calls on
// `stream`, or null before that stream's first training call with dropout.
const void* RnnDropoutState(cudaStream_t stream);

}  // namespace weft::gpu
