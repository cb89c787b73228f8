// Lane chains: a run of unary and binary steps of a fused group (unary forward or backward, binary
// forward; float32), each reading the value the step before it computed, evaluated 64 elements at a
// time (4 math::Lanes of 16) in vector registers: every element passes through every functor of the
// chain before the next 64 are loaded, so a step costs its arithmetic, not an L1 pass and a
// dispatch. The functors are the ops' own, instantiated on Lanes: each lane computes the bits the
// op's loop computes (ops/cpu/unary.cc; tests/ops_lane_chain_test.cc checks every functor). The
// chain prefetches the group inputs it reads (`streamed`) a fixed distance ahead, block by block,
// so main memory keeps up with it; the tile's other prefetch (fused_pointwise.cc) leaves those out.
//
//   std::vector<LaneChain> chains = PlanLaneChains(group, plan);       // at bind time
//   RunLaneChain(chain.steps, src, others, dsts, ahead, 0, n);         // per tile
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ops/elementwise/binary_ops.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/fusion/fused_group.h"
#include "ops/fusion/internal/step_plan.h"

namespace weft::cpu {

// The functors of the unary ops (ops/elementwise/unary_ops.h, its table and the extra functors), as
// the chain's switch knows them.
#define WEFT_LANE_FUNCTOR(name, functor, description, has_scalar) k##functor,
#define WEFT_LANE_EXTRA_FUNCTOR(functor) k##functor,
enum class LaneFunctor : uint8_t {
  WEFT_UNARY_OPS(WEFT_LANE_FUNCTOR) WEFT_UNARY_EXTRA_FUNCTORS(WEFT_LANE_EXTRA_FUNCTOR)
};
#undef WEFT_LANE_EXTRA_FUNCTOR
#undef WEFT_LANE_FUNCTOR

// The functors of the binary ops (ops/elementwise/binary_ops.h); kNone: a unary step.
#define WEFT_LANE_BINARY(name, functor, description) k##functor,
enum class LaneBinary : uint8_t { kNone, WEFT_BINARY_OPS(WEFT_LANE_BINARY) };
#undef WEFT_LANE_BINARY

struct LaneStep {
  static constexpr int kCarried = -1;  // the operand is the value the previous step computed
  LaneFunctor functor;
  bool backward = false;                  // dx = BackwardOf<F>(dy, v, s); else y = F::Fwd(x, s)
  LaneBinary binary = LaneBinary::kNone;  // else the step is y = F::Fwd(x, y) of this functor
  float scalar = 0;
  int x = kCarried;  // forward: x; backward: dy. An index into `others`, or kCarried
  int v = kCarried;  // backward: the value Grad reads (dy itself when it reads nothing)
  int y = kCarried;  // binary: the rhs
  int store =
      -1;  // where the result goes, an index into `dsts`; -1: nowhere (only the next step reads it)
  bool add = false;     // the store adds to what is there
  bool stream = false;  // stored with non-temporal stores (where 16-byte aligned): an output far
                        // larger than the cache
};

// Steps [first, end) of a group as one chain. Values by id: `src` the first step's x (or dy;
// kNoSrc when that is a broadcast input, read as one of `others`), `others` the operands read from
// memory, `dsts` the values stored. `gathered`, one per entry of `others`: the broadcast use
// (StepPlan::broadcast_uses) whose gathered tile it is read from, or -1 (the value itself).
struct LaneChain {
  static constexpr uint32_t kNoSrc = ~0u;
  uint32_t first = 0, end = 0;
  std::vector<LaneStep> steps;
  uint32_t src = 0;
  std::vector<uint32_t> others, dsts;
  std::vector<int> gathered;
  std::vector<uint32_t> streamed;  // src and others that are inputs of the group read in full
};

// The chains of two steps or more among the plan's steps.
std::vector<LaneChain> PlanLaneChains(const FusedGroup& group, const StepPlan& plan);

// Runs `steps` over elements [begin, end): `src` the first step's carried operand (null: none),
// `others` and
// `dsts` base pointers (element 0) of the chain's operands and stored values; `ahead` those of the
// arrays to prefetch ahead of each block (the streamed values: the next tile's elements).
void RunLaneChain(std::span<const LaneStep> steps, const float* src, const float* const* others,
                  float* const* dsts, std::span<const float* const> ahead, int64_t begin,
                  int64_t end);

}  // namespace weft::cpu
