// What the kernel of a fused group (ops/fusion/fused_group.h) reads and writes for one set of
// output requests, and its argument struct: the code generator (codegen.h) names and types the
// fields from it and the host fills their bytes from it (FillArgs), so the two agree by
// construction (the generated source also asserts the struct's size).
//
// A kernel carries only what its code reads: a pointer per full-size input it loads, per
// broadcast input and per output it stores (request not kNull), the scalars of each step that has
// some (PointwiseScalars), the element count, and for each broadcast walk the extents and strides
// its offsets need. Order: the 8-byte fields (pointers, scalars) first, then those of the index
// type, so the layout has no padding but at the end.
//
//   KernelPlan plan = PlanKernel(group, req, /*index64=*/false);
//   std::vector<uint64_t> bytes = FillArgs(plan, group, inputs, outputs);   // plan.bytes of them
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor_view.h"
#include "ops/fusion/fused_group.h"
#include "ops/gpu/kernels/params.cuh"
#include "ops/op.h"

namespace weft::gpu {

// Where a binary step reads a broadcast input: the row-major walk over the step's output shape
// (its frame), axes merged (ops/gpu/internal/axes.h) and outermost first, with the input's stride
// along each (0 along the axes it is broadcast over).
struct BroadcastWalk {
  uint32_t input = 0;
  int ndim = 0;
  int64_t dim[kGpuMaxDims] = {};
  int64_t stride[kGpuMaxDims] = {};
  bool operator==(const BroadcastWalk& o) const;
  // Whether the offset computation reads dim[d] (a divisor) and stride[d] (a factor other than 1).
  bool ReadsDim(int d) const;
  bool ReadsStride(int d) const;
  // The outermost axis the input moves along (stride not 0); ndim when it moves along none (one
  // element, read at offset 0).
  int OutermostMoving() const;
};

struct ArgField {
  enum class Kind : uint8_t { kInput, kOutput, kScalar, kCount, kDim, kStride };
  Kind kind;
  uint32_t index = 0;  // the input, output, step or walk it belongs to
  int axis = 0;        // kDim, kStride: the walk's axis; kScalar: which of the step's scalars
  uint32_t offset = 0;
  uint32_t size = 8;
  std::string name;  // in the generated struct: in3, out0, s5, t5, n, w1d2, w1s0
};

struct KernelPlan {
  std::vector<OpReq> out_req;                      // per output: kNull, kWrite or kAddTo
  std::vector<bool> live;                          // per step: computed (something stored reads it)
  std::vector<bool> loaded;                        // per input: read as data by a live step
  std::vector<FusedGroup::InputKind> input_kinds;  // per input (FusedGroup::InputKinds)
  std::vector<BroadcastWalk> walks;                // distinct walks of live steps
  std::vector<std::vector<int>> walk_of;           // per step, per arg: its walk, or -1
  bool index64 = false;
  std::vector<ArgField> fields;  // in struct order
  uint32_t bytes = 0;            // sizeof the struct
};

// `req`: one per output of the group. Throws weft::Error (naming the group) for a group whose
// walks need more than kGpuMaxDims axes.
KernelPlan PlanKernel(const FusedGroup& group, std::span<const OpReq> req, bool index64);

// How many scalars the step's functor takes from its attributes (PointwiseScalars: a *_scalar op
// or its backward 1, clip 2), which the kernel reads as fields ScalarField(step, k); 0 for other
// steps (unary functors without scalars get 0 for the one they take).
int ScalarsTaken(const FusedGroup::Step& step);
// The field of scalar k of step `step`: s<step>, then t<step>.
std::string ScalarField(uint32_t step, int k);

// Whether every output's request is kNull: the kernel would do nothing.
bool StoresNothing(const KernelPlan& plan);

// The argument struct's bytes for these tensors (inputs and outputs of the fused node), as
// 8-byte words (plan.bytes rounded up).
std::vector<uint64_t> FillArgs(const KernelPlan& plan, const FusedGroup& group,
                               std::span<const TensorView> inputs,
                               std::span<const TensorView> outputs);

}  // namespace weft::gpu
