// Pointwise fusion: groups of connected pointwise ops (unary, binary with broadcasting, the scalar
// forms, their backward ops, add_n, casts) and the reshapes between them become one
// `_fused_pointwise` node each (ops/fusion/fused_group.h), which keeps the unfused ops as its
// steps. Runs on a typed graph after the gradient and CSE, before memory planning (the bind
// pipeline, passes/pipeline.h). The partition is passes/internal/fusion_partition.h; the rewrite,
// fuse_pointwise.cc.
//
// A node joins a group when it is pointwise on floating-point data, every output of it has the
// group's element count (only a binary op's inputs may be smaller: broadcast), it is in the same
// phase (forward and backward groups are kept apart), and the group stays convex: no path leaves
// the group and comes back, so the fused graph has no cycle. Groups of one node are left as they
// are. The partition visits each node once, in topological order, keeping for every node the few
// groups that reach it (at most kReachCap of them; past that it is conservative and fuses less),
// so it is linear in the graph's size. Groups that grow after an outside node read them can still
// meet in a cycle of the condensed graph; the rewrite finds those (one pass over the strongly
// connected components, only when its topological sort fails) and splits the groups on them back.
// Before it partitions, the pass lets backward ops recompute cheap forward values instead of
// reading them (passes/rematerialize.h), unless `recompute` is false. That trade is worth it
// where a fused kernel is bound by memory (a GPU); on the CPU a fused group runs at about the
// speed of its math, and recomputing a GELU (a tanh per element) in backward cost the MLP of
// bench/fusion_bench 15-20% of its training step, while the 8-op chain gained nothing from it.
// The bind pipeline recomputes on GPUs only.
//
//   Graph fused = FusePointwise(typed);   // typed.has_types()
//   FusionStats stats;  FusePointwise(typed, &stats);   // stats.groups, stats.fused_nodes
//   FusePointwise(typed, nullptr, /*recompute=*/false);
#pragma once

#include <cstddef>

#include "graph/graph.h"

namespace weft {

struct FusionStats {
  size_t groups = 0;       // fused nodes made
  size_t fused_nodes = 0;  // unfused nodes they replace
  size_t recomputed = 0;   // forward nodes copied into the backward phase (passes/rematerialize.h)
};

inline constexpr size_t kReachCap = 32;

// `graph` must be typed (shape and type inference has run); the result is typed too.
Graph FusePointwise(const Graph& graph, FusionStats* stats = nullptr, bool recompute = true);

}  // namespace weft
