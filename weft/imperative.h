// Calling any registered op on NDArrays. The call infers output shapes and types, allocates the
// outputs (unless given), pushes the op to the engine with the vars it reads and writes, and
// returns at once.
//
//   NDArray y = Invoke("FullyConnected", {x, w, b}, {{"num_hidden", "128"}})[0];
//   Invoke("sgd_update", {w, g}, {{"lr", "0.1"}}, {.outputs = {w}});   // updates w in place
//
// Errors in the call (unknown op, bad attribute, wrong shapes or count, mixed devices) are thrown
// here; errors inside the op's compute come out of the outputs' WaitToRead.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "ops/op.h"
#include "storage/ndarray.h"

namespace weft {

struct InvokeOptions {
  std::vector<NDArray> outputs;  // where to write; empty: allocate new arrays
  std::vector<OpReq> req;  // per output; empty: kWrite (kWriteInplace where an output is an input)
  bool is_train = false;   // Dropout and friends act only in training
};

std::vector<NDArray> Invoke(const std::string& op, const std::vector<NDArray>& inputs,
                            const AttrMap& attrs = {}, const InvokeOptions& options = {});
std::vector<NDArray> Invoke(const Op& op, const Attrs& attrs, const std::vector<NDArray>& inputs,
                            const InvokeOptions& options = {});
// The same into outputs that exist (checked against what the op infers), with nothing returned:
// the leanest call, for in-place updates on hot paths. `req` empty: kWrite (or kWriteInplace).
void InvokeInto(const Op& op, const Attrs& attrs, std::span<const NDArray> inputs,
                std::span<const NDArray> outputs, std::span<const OpReq> req = {},
                bool is_train = false);

// Runs the gradient rule of `op` on arrays: given the forward call's inputs and outputs and the
// gradients of its outputs, writes (req kWrite) or adds (kAddTo) the gradient of each input into
// `input_grads[i]` (kNull, or a null array: skipped). Inputs the op gives no gradient are skipped.
// `is_train` is the mode the forward call ran in, for backward ops whose rule depends on it
// (BatchNorm's differentiates its batch statistics in training only); true by default, as
// Executor::Backward runs its backward ops.
void InvokeBackward(const Op& op, const Attrs& attrs, const std::vector<NDArray>& inputs,
                    const std::vector<NDArray>& outputs, const std::vector<NDArray>& output_grads,
                    const std::vector<NDArray>& input_grads, const std::vector<OpReq>& req,
                    bool is_train = true);

}  // namespace weft
