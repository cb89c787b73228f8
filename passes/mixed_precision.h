// Mixed precision: the per-op policy that says which ops compute in 16 bits, and the pass that
// applies it to a forward graph by inserting casts. A mixed-precision trainer (weft/trainer.h,
// TrainerOptions::precision) binds its step with it, before the gradient pass, so the backward of
// every cast it inserts brings the gradients back to the dtype of what was cast (float32 master
// weights get float32 gradients). The policy, as PyTorch's autocast and MXNet's AMP draw it:
//
//   op                                           precision   what the pass does to its inputs
//   FullyConnected, Convolution, matmul,         kLow        every floating input in the low
//   batch_dot, Attention, RNN                                dtype (the libraries accumulate in
//                                                            float32)
//   softmax, log_softmax, sum, mean, max, norm,  kFloat32    every floating input in float32
//   multi_sum_sq
//   BatchNorm, LayerNorm, SoftmaxCrossEntropy    kData       the data as it comes; the affine
//                                                            parameters, running statistics and
//                                                            labels in float32 (their statistics,
//                                                            and the loss, are float32)
//   Cast                                         kKeep       as the graph has it (the model's own)
//   every other op (elementwise, shape, ...)     kWidest     the floating inputs in the widest of
//                                                            their dtypes (float32 + bfloat16 ->
//                                                            float32)
//
// PrecisionPolicy::overrides replaces a row by op name. Inputs that are not floating point
// (labels as integers, masks as bool) are never cast. One cast per entry and dtype: two readers
// of a weight share its cast (CSE, which runs after this pass, merges the casts of duplicated
// expressions). Bind runs it (passes/pipeline.h, WEFT_MIXED_PRECISION) when the request has a
// policy; switched off, the step computes in float32. Two later passes fold casts it leads to
// into the ops beside them: a LayerNorm's output cast to 16 bits (fold_norm_cast.h) and a
// FullyConnected's parameter gradients widened to float32 (fold_grad_cast.h).
//
//   PrecisionPolicy policy{.low = DType::kBFloat16};
//   int casts = 0;
//   Graph mixed = MixedPrecision(graph, policy, /*argument_dtypes=*/{}, &casts);
//   CastArguments(mixed, DType::kBFloat16)   // {"fc1_weight", "fc1_bias", ...}
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "graph/graph.h"

namespace weft {

enum class OpPrecision {
  kLow,      // every floating input in the policy's low dtype
  kFloat32,  // every floating input in float32
  kData,     // input 0 as it comes, the other floating inputs in float32
  kWidest,   // the floating inputs in the widest of their dtypes (the default)
  kKeep,     // as the graph has it
};

// The table above; ops not in it are kWidest.
inline constexpr std::pair<const char*, OpPrecision> kPrecisionTable[] = {
    {"FullyConnected", OpPrecision::kLow},
    {"Convolution", OpPrecision::kLow},
    {"matmul", OpPrecision::kLow},
    {"batch_dot", OpPrecision::kLow},
    {"Attention", OpPrecision::kLow},
    {"RNN", OpPrecision::kLow},
    {"softmax", OpPrecision::kFloat32},
    {"log_softmax", OpPrecision::kFloat32},
    {"sum", OpPrecision::kFloat32},
    {"mean", OpPrecision::kFloat32},
    {"max", OpPrecision::kFloat32},
    {"norm", OpPrecision::kFloat32},
    {"multi_sum_sq", OpPrecision::kFloat32},
    {"BatchNorm", OpPrecision::kData},
    {"LayerNorm", OpPrecision::kData},
    {"SoftmaxCrossEntropy", OpPrecision::kData},
    {"Cast", OpPrecision::kKeep},
};

struct PrecisionPolicy {
  DType low = DType::kBFloat16;                  // bfloat16 or float16
  std::map<std::string, OpPrecision> overrides;  // by op name, over kPrecisionTable

  // The row for `op`: its override, else kPrecisionTable's, else kWidest.
  OpPrecision Of(const std::string& op) const;
};

// `graph` (a forward graph: no gradient nodes yet) with the casts the policy asks for, each a Cast
// node named "<entry's node>_<dtype>". `argument_dtypes`: the arguments' dtypes where not float32.
// *casts (if not null) counts the casts inserted. Throws weft::Error for a low dtype that is not
// bfloat16 or float16, or, naming the node, when an op rejects the dtypes its inputs then have.
Graph MixedPrecision(const Graph& graph, const PrecisionPolicy& policy,
                     const std::map<std::string, DType>& argument_dtypes = {},
                     int* casts = nullptr);

// The argument whose variable node `n` of `graph` casts to `dtype`, when `n` is such a forward
// Cast node; null otherwise.
const Node* CastArgument(const Graph& graph, uint32_t n, DType dtype);
// The arguments that `graph` casts to `dtype` (CastArgument), in node order: the weights a
// mixed-precision step reads in 16 bits.
std::vector<std::string> CastArguments(const Graph& graph, DType dtype);

}  // namespace weft
