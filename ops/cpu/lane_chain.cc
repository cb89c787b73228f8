#include "ops/cpu/internal/lane_chain.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/no_destructor.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/elementwise/unary_ops.h"
#include "ops/math/binary.h"
#include "ops/math/unary.h"

namespace weft::cpu {

namespace {

using math::Lanes;
using Home = StepPlan::Home;

// The functor an op's PointwiseFn names ("weft::fn::Relu"), if it is one of the unary ops'.
std::optional<LaneFunctor> FunctorNamed(const std::string& name) {
  static const NoDestructor<std::unordered_map<std::string, LaneFunctor>> table(
      std::unordered_map<std::string, LaneFunctor>{
#define WEFT_LANE_ENTRY(functor) {"weft::fn::" #functor, LaneFunctor::k##functor},
#define WEFT_LANE_OP_ENTRY(name, functor, description, has_scalar) WEFT_LANE_ENTRY(functor)
          WEFT_UNARY_OPS(WEFT_LANE_OP_ENTRY) WEFT_UNARY_EXTRA_FUNCTORS(WEFT_LANE_ENTRY)
#undef WEFT_LANE_OP_ENTRY
#undef WEFT_LANE_ENTRY
      });
  const auto it = table->find(name);
  return it == table->end() ? std::nullopt : std::optional<LaneFunctor>(it->second);
}

// The binary functor an op's PointwiseFn names ("weft::fn::Add"), if it is one of the binary ops'.
std::optional<LaneBinary> BinaryNamed(const std::string& name) {
  static const NoDestructor<std::unordered_map<std::string, LaneBinary>> table(
      std::unordered_map<std::string, LaneBinary>{
#define WEFT_LANE_BINARY_ENTRY(name, functor, description) \
  {"weft::fn::" #functor, LaneBinary::k##functor},
          WEFT_BINARY_OPS(WEFT_LANE_BINARY_ENTRY)
#undef WEFT_LANE_BINARY_ENTRY
      });
  const auto it = table->find(name);
  return it == table->end() ? std::nullopt : std::optional<LaneBinary>(it->second);
}

// A binary op's step (its operands may be broadcast inputs: the chain reads their gathered tiles).
std::optional<LaneStep> BinaryLaneStep(const FusedGroup::Step& step) {
  const std::optional<LaneBinary> binary = BinaryNamed(step.op->pointwise.Functor(step.attrs));
  if (!binary) return std::nullopt;
  LaneStep lane{};
  lane.binary = *binary;
  return lane;
}

// A step a chain can carry: a unary op or its backward, or a binary op, with one output, on
// float32, that runs. Only a binary step reads broadcast inputs.
std::optional<LaneStep> LaneStepOf(const FusedGroup& g, const StepPlan& plan, size_t s) {
  const FusedGroup::Step& step = g.steps[s];
  const PointwiseFn& pw = step.op->pointwise;
  const bool binary = pw.kind == PointwiseKind::kBinary;
  if (pw.kind != PointwiseKind::kUnary && pw.kind != PointwiseKind::kUnaryBackward && !binary)
    return std::nullopt;
  if (step.num_outputs != 1 || !plan.runs(s) || g.dtypes[step.first_output] != DType::kFloat32)
    return std::nullopt;
  for (size_t a = 0; a < step.args.size(); ++a) {
    if (g.dtypes[step.args[a]] != DType::kFloat32) return std::nullopt;
    if (!binary && plan.broadcast_use(s, a) >= 0) return std::nullopt;
  }
  if (binary) return BinaryLaneStep(step);
  const std::optional<LaneFunctor> functor = FunctorNamed(pw.Functor(step.attrs));
  if (!functor) return std::nullopt;
  LaneStep lane{*functor};
  lane.backward = pw.kind == PointwiseKind::kUnaryBackward;
  // The one scalar a unary op of the table takes (clip, of two, is no lane functor), converted as
  // the op's loop converts it.
  lane.scalar = static_cast<float>(pw.Scalars(step.attrs).values[0]);
  return lane;
}

// The index of `value` (read through broadcast use `gathered`, or -1: itself) among the chain's
// operands read from memory, added if new.
int Other(LaneChain& chain, uint32_t value, int gathered) {
  for (size_t k = 0; k < chain.others.size(); ++k) {
    if (chain.others[k] == value && chain.gathered[k] == gathered) return static_cast<int>(k);
  }
  chain.others.push_back(value);
  chain.gathered.push_back(gathered);
  return static_cast<int>(chain.others.size() - 1);
}

// Where step `s` of the chain takes its operands: `carried` is the value in registers (the
// previous step's output, or the chain's src for its first step; kNoSrc: none).
void SetOperands(LaneChain& chain, const StepPlan& plan, uint32_t s, uint32_t carried,
                 LaneStep& lane) {
  const FusedGroup::Step& step = plan.group().steps[s];
  const auto source = [&](size_t a) {
    const int use = plan.broadcast_use(s, a);
    return use < 0 && step.args[a] == carried ? LaneStep::kCarried
                                              : Other(chain, step.args[a], use);
  };
  lane.x = source(0);
  if (lane.binary != LaneBinary::kNone) {
    lane.y = source(1);
    return;
  }
  lane.v = step.args.size() > 1 ? source(1) : lane.x;  // a Grad that reads nothing: dy
}

// Which step outputs the chain stores: every one that something other than the next step of the
// chain reads (a later step, an output, the copies at the end), and the last.
void SetStores(const FusedGroup& g, const StepPlan& plan, const std::vector<int>& reads,
               LaneChain& chain) {
  for (size_t k = 0; k < chain.steps.size(); ++k) {
    const uint32_t s = chain.first + static_cast<uint32_t>(k), v = g.steps[s].first_output;
    const bool last = k + 1 == chain.steps.size();
    const int next_reads = last ? 0
                                : static_cast<int>(std::count(g.steps[s + 1].args.begin(),
                                                              g.steps[s + 1].args.end(), v));
    if (!last && plan.home(v) == Home::kScratch && reads[v] == next_reads && !plan.copied_at_end(v))
      continue;
    chain.steps[k].store = static_cast<int>(chain.dsts.size());
    chain.steps[k].add = plan.request(s, 0) == OpReq::kAddTo;
    chain.dsts.push_back(v);
  }
}

// The chain's operands that are inputs of the group read in full: it prefetches them ahead.
void SetStreamed(const FusedGroup& g, const std::vector<FusedGroup::InputKind>& kinds,
                 LaneChain& chain) {
  const auto full = [&](uint32_t v) {
    return v < g.num_inputs && kinds[v] == FusedGroup::InputKind::kFull;
  };
  if (chain.src != LaneChain::kNoSrc && full(chain.src)) chain.streamed.push_back(chain.src);
  for (size_t k = 0; k < chain.others.size(); ++k) {
    if (chain.gathered[k] < 0 && full(chain.others[k])) chain.streamed.push_back(chain.others[k]);
  }
}

// The longest chain from step `first` on: each next step reads the previous one's output.
LaneChain ChainFrom(const FusedGroup& g, const StepPlan& plan, uint32_t first, LaneStep lane) {
  LaneChain chain;
  chain.first = first;
  chain.src = plan.broadcast_use(first, 0) < 0 ? g.steps[first].args[0] : LaneChain::kNoSrc;
  SetOperands(chain, plan, first, chain.src, lane);
  chain.steps.push_back(lane);
  uint32_t end = first + 1;
  for (; end < g.steps.size(); ++end) {
    const std::optional<LaneStep> next = LaneStepOf(g, plan, end);
    const uint32_t prev = g.steps[end - 1].first_output;
    const std::vector<uint32_t>& args = g.steps[end].args;
    if (!next || std::find(args.begin(), args.end(), prev) == args.end()) break;
    chain.steps.push_back(*next);
    SetOperands(chain, plan, end, prev, chain.steps.back());
  }
  chain.end = end;
  return chain;
}

// A chain carries 4 Lanes, 64 floats, through its steps at once, so that a step's dispatch is paid
// once for 4 vectors and the 4 computations overlap: four variables, not an array or a struct of
// them (GCC keeps an aggregate of more than 64 bytes in memory, not in registers).
constexpr int kVectors = 4;
constexpr int64_t kBlock = kVectors * Lanes::kWidth;

// The lines kAheadBytes past p, the block's span of an array read in full: while the block's
// steps run, main memory brings what a later block reads. An address computed, not a pointer
// formed: past an array's end it prefetches nothing that matters and cannot fault.
constexpr uintptr_t kAheadBytes = 2048;
[[gnu::always_inline]] inline void PrefetchAhead(const float* p) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + kAheadBytes;
  for (uintptr_t line = 0; line < kBlock * sizeof(float); line += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(at + line));
  }
}

// Lanes j of the block of 64 at p + i of which [0, n) are elements (the rest 0); kFull: n is 64.
template <bool kFull>
[[gnu::always_inline]] inline Lanes Load(const float* p, int64_t i, int64_t n, int j) {
  Lanes l(0);
  const int64_t m =
      kFull ? Lanes::kWidth : std::clamp<int64_t>(n - j * Lanes::kWidth, 0, Lanes::kWidth);
  if (m > 0)
    std::memcpy(&l.v, p + i + j * Lanes::kWidth, m * sizeof(float));  // no pointer past the end
  return l;
}

// Stores Lanes j of the block as `step` says (see Load).
template <bool kFull>
[[gnu::always_inline]] inline void Store(float* p, int64_t i, int64_t n, int j,
                                         const LaneStep& step, Lanes l) {
  if (step.add) l = Load<kFull>(p, i, n, j) + l;
  float* at = p + i + j * Lanes::kWidth;
#if defined(__SSE2__)
  if (kFull && step.stream && reinterpret_cast<uintptr_t>(at) % 16 == 0) {  // SSE's, in every clone
    // The quarters taken out of the register (a shuffle), not through memory: a 64-byte store
    // then 16-byte loads from it would wait on store forwarding.
    _mm_stream_ps(at, __builtin_shufflevector(l.v, l.v, 0, 1, 2, 3));
    _mm_stream_ps(at + 4, __builtin_shufflevector(l.v, l.v, 4, 5, 6, 7));
    _mm_stream_ps(at + 8, __builtin_shufflevector(l.v, l.v, 8, 9, 10, 11));
    _mm_stream_ps(at + 12, __builtin_shufflevector(l.v, l.v, 12, 13, 14, 15));
    return;
  }
#endif
  const int64_t m =
      kFull ? Lanes::kWidth : std::clamp<int64_t>(n - j * Lanes::kWidth, 0, Lanes::kWidth);
  if (m > 0) std::memcpy(at, &l.v, m * sizeof(float));
}

// One step on the 4 carried Lanes (x; v: what a backward step's Grad reads, a binary step's rhs):
// the switch over every unary and binary functor, each inlined, so that the carried values stay
// in registers.
[[gnu::always_inline]] inline void Apply(const LaneStep& step, Lanes& x0, Lanes& x1, Lanes& x2,
                                         Lanes& x3, Lanes v0, Lanes v1, Lanes v2, Lanes v3) {
  switch (step.binary) {
#define WEFT_LANE_BINARY_CASE(name, functor, description) \
  case LaneBinary::k##functor:                            \
    x0 = fn::functor::Fwd(x0, v0);                        \
    x1 = fn::functor::Fwd(x1, v1);                        \
    x2 = fn::functor::Fwd(x2, v2);                        \
    x3 = fn::functor::Fwd(x3, v3);                        \
    return;
    WEFT_BINARY_OPS(WEFT_LANE_BINARY_CASE)
#undef WEFT_LANE_BINARY_CASE
    case LaneBinary::kNone:
      break;
  }
  const Lanes s(step.scalar);
  switch (step.functor) {
#define WEFT_LANE_CASE(functor)                    \
  case LaneFunctor::k##functor:                    \
    if (step.backward) {                           \
      x0 = fn::BackwardOf<fn::functor>(x0, v0, s); \
      x1 = fn::BackwardOf<fn::functor>(x1, v1, s); \
      x2 = fn::BackwardOf<fn::functor>(x2, v2, s); \
      x3 = fn::BackwardOf<fn::functor>(x3, v3, s); \
    } else {                                       \
      x0 = fn::functor::Fwd(x0, s);                \
      x1 = fn::functor::Fwd(x1, s);                \
      x2 = fn::functor::Fwd(x2, s);                \
      x3 = fn::functor::Fwd(x3, s);                \
    }                                              \
    return;
#define WEFT_LANE_OP_CASE(name, functor, description, has_scalar) WEFT_LANE_CASE(functor)
    WEFT_UNARY_OPS(WEFT_LANE_OP_CASE)
    WEFT_UNARY_EXTRA_FUNCTORS(WEFT_LANE_CASE)
#undef WEFT_LANE_OP_CASE
#undef WEFT_LANE_CASE
  }
}

// Elements [i, i + n) through every step; kFull: n is kBlock.
template <bool kFull>
[[gnu::always_inline]] inline void RunBlock(std::span<const LaneStep> steps, const float* src,
                                            const float* const* others, float* const* dsts,
                                            std::span<const float* const> ahead, int64_t i,
                                            int64_t n) {
  for (const float* p : ahead) PrefetchAhead(p + i);
  Lanes c0(0), c1(0), c2(0), c3(0);
  if (src != nullptr) {
    c0 = Load<kFull>(src, i, n, 0), c1 = Load<kFull>(src, i, n, 1);
    c2 = Load<kFull>(src, i, n, 2), c3 = Load<kFull>(src, i, n, 3);
  }
  for (const LaneStep& step : steps) {
    const auto operand = [&](int source, Lanes carried, int j) __attribute__((always_inline)) {
      return source == LaneStep::kCarried ? carried : Load<kFull>(others[source], i, n, j);
    };
    Lanes x0 = operand(step.x, c0, 0), x1 = operand(step.x, c1, 1), x2 = operand(step.x, c2, 2),
          x3 = operand(step.x, c3, 3);
    const int v = step.binary == LaneBinary::kNone ? step.v : step.y;
    Apply(step, x0, x1, x2, x3, operand(v, c0, 0), operand(v, c1, 1), operand(v, c2, 2),
          operand(v, c3, 3));
    c0 = x0, c1 = x1, c2 = x2, c3 = x3;
    if (step.store < 0) continue;
    float* dst = dsts[step.store];
    Store<kFull>(dst, i, n, 0, step, c0), Store<kFull>(dst, i, n, 1, step, c1);
    Store<kFull>(dst, i, n, 2, step, c2), Store<kFull>(dst, i, n, 3, step, c3);
  }
}

}  // namespace

std::vector<LaneChain> PlanLaneChains(const FusedGroup& g, const StepPlan& plan) {
  std::vector<int> reads(g.num_values(), 0);
  for (const FusedGroup::Step& step : g.steps) {
    for (uint32_t a : step.args) ++reads[a];
  }
  const std::vector<FusedGroup::InputKind> kinds = g.InputKinds();
  std::vector<LaneChain> chains;
  for (uint32_t s = 0; s < g.steps.size();) {
    const std::optional<LaneStep> lane = LaneStepOf(g, plan, s);
    if (!lane) {
      ++s;
      continue;
    }
    LaneChain chain = ChainFrom(g, plan, s, *lane);
    s = chain.end;
    if (chain.steps.size() < 2) continue;  // one step: its op's own loop is as fast
    SetStores(g, plan, reads, chain);
    SetStreamed(g, kinds, chain);
    chains.push_back(std::move(chain));
  }
  return chains;
}

WEFT_CPU_VECTOR_CLONES void RunLaneChain(std::span<const LaneStep> steps, const float* src,
                                         const float* const* others, float* const* dsts,
                                         std::span<const float* const> ahead, int64_t begin,
                                         int64_t end) {
  int64_t i = begin;
  for (; i + kBlock <= end; i += kBlock) RunBlock<true>(steps, src, others, dsts, ahead, i, kBlock);
  if (i < end) RunBlock<false>(steps, src, others, dsts, ahead, i, end - i);
}

}  // namespace weft::cpu
