// A fused group: connected pointwise ops of a bound graph that run as one node, `_fused_pointwise`
// (fused_pointwise.cc defines it). The fusion pass (passes/fuse_pointwise.h) builds the group;
// the CPU runs it over tiles (ops/cpu/fused_pointwise.cc), the GPU as one generated kernel
// (ops/gpu/fused_pointwise.cc). The group keeps its unfused ops, in order, as its steps: they are
// the CPU's code, the GPU's fallback, and what the code generator translates (each step's op names
// its functor in Op::pointwise, so fused code calls exactly what the unfused op calls).
//
// Values are numbered: [0, num_inputs) are the fused node's inputs, then every output of every
// step in order. Every step output has `size` elements, the group's iteration space, so a value is
// read and written at one flat index. An input is either full (`size` elements, flat-indexed),
// broadcast (fewer: read only by binary steps, which broadcast it against their output's shape),
// or meta (read for its shape or dtype only: the 2nd input of reshape_like and _backward_Cast).
//
//   const FusedGroup& g = *attrs.Get<FusedParam>().group;
//   for (const FusedGroup::Step& s : g.steps) ... s.op->pointwise.Functor(s.attrs) ... s.args ...
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "ops/op.h"

namespace weft {

struct FusedGroup {
  struct Step {
    const Op* op = nullptr;  // a pointwise op (Op::pointwise is set)
    Attrs attrs;
    std::string name;            // the unfused node's name
    std::vector<uint32_t> args;  // the value of each of the op's inputs
    uint32_t first_output = 0;   // value id of its output 0; its outputs are consecutive
    uint32_t num_outputs = 1;
  };
  enum class InputKind : uint8_t { kFull, kBroadcast, kMeta };

  uint32_t num_inputs = 0;
  std::vector<Shape> shapes;      // per value
  std::vector<DType> dtypes;      // per value
  std::vector<Step> steps;        // in the unfused graph's (topological) order
  std::vector<uint32_t> outputs;  // the fused node's outputs, as values (distinct step outputs)
  int64_t size = 0;               // elements of every step output
  bool backward = false;          // a group of backward nodes
  std::string label;              // "fused(mul_scalar, add_scalar, relu)": messages, profiles

  uint32_t num_values() const { return static_cast<uint32_t>(shapes.size()); }
  std::vector<InputKind> InputKinds() const;   // per input, in one pass over the steps
  InputKind input_kind(uint32_t input) const;  // one of them (the same pass: for single questions)
  // For each value: the step that computes it, or -1 for inputs.
  std::vector<int> Producers() const;
  // For each value: the index among `outputs`, or -1.
  std::vector<int> OutputIndex() const;
  // For outputs requested as `req` (one per output): for each value, whether it is needed, that
  // is stored (an output not asked for kNull) or read as data by a step that is live; a step is
  // live when one of its outputs is needed. Transitive: a step read only by dead steps is dead.
  std::vector<bool> LiveValues(std::span<const OpReq> req) const;
  std::vector<bool> LiveSteps(std::span<const OpReq> req) const;  // for each step
  // Throws weft::Error (naming the group) unless the steps read only earlier values, every step
  // output has `size` elements, and only binary steps read broadcast inputs.
  void Check() const;
};

// The attribute a `_fused_pointwise` node carries (built by the pass, never parsed from text).
struct FusedParam {
  std::shared_ptr<const FusedGroup> group;
};

// Attrs holding `group`, for a node of the op `_fused_pointwise`.
Attrs FusedAttrs(std::shared_ptr<const FusedGroup> group);

}  // namespace weft
