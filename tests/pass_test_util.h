// What the tests of the bind passes share (fold_batch_norm, fold_activation, fold_sum,
// channels_last, compose_moves, commute_moves): counting a graph's ops, movement ops, random
// arguments for a symbol, its outputs bound for inference on the CPU with one pass switched on or
// off, to compare the two, and the bind pipeline's result on the CPU (which passes ran, what they
// counted).
//
//   Executor::ArrayMap args = RandomArguments(net, {{"data", Shape{2, 3, 8, 8}}});
//   auto on = InferOutputs(net, args, "WEFT_FOLD_SUM", true);
//   auto off = InferOutputs(net, args, "WEFT_FOLD_SUM", false);
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "passes/pipeline.h"
#include "weft/weft.h"

namespace weft::testing {

// The nodes of g that run `op`.
size_t CountOps(const Graph& g, const std::string& op);

// Arrays for every argument of s (shapes inferred from `shapes`, which are bound too), uniform in
// [-1, 1), of `dtype`, on the CPU.
Executor::ArrayMap RandomArguments(const Symbol& s, const std::map<std::string, Shape>& shapes,
                                   DType dtype = DType::kFloat32);

// s bound to `args` on the CPU for inference with the environment switch `pass` set to `on`,
// run once: every output's values as doubles (float32 or float64 outputs).
std::vector<std::vector<double>> InferOutputs(const Symbol& s, const Executor::ArrayMap& args,
                                              const char* pass, bool on);

// The outputs of s bound for inference on `data` (its other arguments random) with the switch
// `pass` on equal those with it off, bit for bit (a GoogleTest failure per output that differs).
void ExpectPassKeepsOutputs(const Symbol& s, const Shape& data, const char* pass);

// Movement ops as the passes that compose and commute them see them: a reshape to `shape`, a
// transpose by `axes`, and positions [begin, end) of `axis`.
Symbol Reshape(const Symbol& x, const std::vector<int64_t>& shape);
Symbol Transpose(const Symbol& x, const std::vector<int64_t>& axes);
Symbol Slice(const Symbol& x, int64_t axis, int64_t begin, int64_t end);

// RunBindPipeline on the CPU with data of shape `data`, the gradients of `differentiate`
// requested (none: an inference bind).
BindResult BindCpu(const Symbol& s, const Shape& data, std::set<std::string> differentiate = {});

}  // namespace weft::testing
