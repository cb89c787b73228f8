#include "passes/fold_grad_cast.h"

#include <string>
#include <vector>

#include "graph/rewrite.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

constexpr uint32_t kNone = ~0u;

bool Runs(const Node& n, const char* op) { return n.op != nullptr && n.op->name == op; }

// For each entry, the one node that reads it (kNone: none, several, or a graph output).
std::vector<uint32_t> SoleReaders(const Graph& g) {
  const std::vector<uint32_t> uses = g.EntryUseCounts();
  std::vector<uint32_t> reader(g.num_entries(), kNone);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    for (const NodeEntry& e : g.node(n).inputs) {
      if (uses[g.EntryId(e)] == 1) reader[g.EntryId(e)] = n;
    }
  }
  return reader;
}

// The _backward_Cast nodes that alone read the parameter gradients of backward node `b`, each
// widening its gradient to float32; empty unless `b` is a _backward_FullyConnected of 16-bit data
// without param_grad_dtype whose every parameter gradient is read so.
std::vector<uint32_t> WideningCasts(const Graph& g, const std::vector<uint32_t>& reader,
                                    uint32_t b) {
  const Node& node = g.node(b);
  if (!Runs(node, "_backward_FullyConnected") || node.attrs.Get<FcParam>().param_grad_dtype ||
      !Is16BitFloat(g.dtypes()[g.EntryId(node.inputs[0])])) {
    return {};
  }
  std::vector<uint32_t> casts;
  for (uint32_t k = 1; k < g.num_outputs(b); ++k) {
    const uint32_t r = reader[g.EntryId({b, k})];
    if (r == kNone || !Runs(g.node(r), "_backward_Cast") ||
        !(g.node(r).inputs[0] == NodeEntry{b, k}))
      return {};
    if (g.dtypes()[g.EntryId({r, 0})] != DType::kFloat32) return {};
    casts.push_back(r);
  }
  return casts;
}

}  // namespace

Graph FoldGradCast(const Graph& g, int* folded) {
  const std::vector<uint32_t> reader = SoleReaders(g);
  std::vector<std::vector<uint32_t>> casts(g.nodes().size());
  std::vector<bool> dropped(g.nodes().size(), false);
  int count = 0;
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    casts[n] = WideningCasts(g, reader, n);
    for (uint32_t c : casts[n]) dropped[c] = true;
    count += casts[n].empty() ? 0 : 1;
  }
  if (folded != nullptr) *folded = count;
  if (count == 0) return g;
  GraphRewrite r(g);
  for (uint32_t n = 0; n < g.nodes().size(); ++n) {
    if (dropped[n]) continue;  // its entry was mapped to the backward's output below
    if (casts[n].empty()) {
      r.Keep(n);
      continue;
    }
    Node written = WithAttrs(g.node(n), {{"param_grad_dtype", "float32"}});
    for (NodeEntry& e : written.inputs) e = r.Map(e);
    std::vector<uint32_t> typed_like = {g.EntryId({n, 0})};
    for (uint32_t c : casts[n]) typed_like.push_back(g.EntryId({c, 0}));
    const uint32_t now = r.Add(std::move(written), typed_like);
    r.MapNode(n, now);
    r.MapEntry({n, 0}, {now, 0});
    for (uint32_t k = 1; k < g.num_outputs(n); ++k) {
      r.MapEntry({n, k}, {now, k});
      r.MapEntry({casts[n][k - 1], 0}, {now, k});
    }
  }
  return std::move(r).Finish();
}

}  // namespace weft
