#include "passes/compose_moves.h"

#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/rewrite.h"
#include "ops/op.h"
#include "ops/tensor/tensor_params.h"
#include "passes/internal/moves.h"
#include "passes/prune.h"

namespace weft {
namespace {

// Where an op's output lies in its chain's root (the root's elements counted in row-major
// order): output axis k walks the runs axes[k] (none for an axis of extent 1), from `offset`. An
// axis of several runs is what a reshape makes of axes that do not run evenly into each other
// ((T, B, H, D) of a packed projection seen as (T, B*H, D)); a later reshape may split it again.
struct View {
  NodeEntry root;
  std::vector<Runs> axes;
  int64_t offset = 0;
};

// Every axis's runs in order: the view's whole walk.
Runs Walk(const View& v) {
  Runs all;
  for (const Runs& axis : v.axes) all.insert(all.end(), axis.begin(), axis.end());
  return Normalized(all);
}

// Entry e of shape s as it lies: the whole root, in order.
View Whole(NodeEntry e, const Shape& s) {
  View v{e, std::vector<Runs>(s.ndim()), 0};
  int64_t step = 1;
  for (int k = s.ndim() - 1; k >= 0; --k) {
    v.axes[k] = Normalized({{s[k], step}});
    step *= s[k];
  }
  return v;
}

// Axis k's positions [begin, end) of v: a range of its outermost run, in whole steps of the runs
// inside it; false where the range is not.
bool SliceAxis(View& v, int k, int64_t begin, int64_t end) {
  Runs& runs = v.axes[k];
  if (runs.empty() || end <= begin) return false;
  int64_t inner = 1;
  for (size_t i = 1; i < runs.size(); ++i) inner *= runs[i].extent;
  if (begin % inner != 0 || end % inner != 0) return false;
  v.offset += begin / inner * runs[0].stride;
  runs[0].extent = (end - begin) / inner;
  runs = Normalized(runs);
  return true;
}

// View v (of shape `in`) after move node n (of output shape `out`); nullopt where the op's
// output is no view of v's root that runs can say.
std::optional<View> After(const Node& n, const Shape& in, const Shape& out, View v) {
  if (in.Size() == 0) return std::nullopt;
  if (IsReshape(n)) {
    std::optional<std::vector<Runs>> axes = Regrouped(Walk(v), out);
    if (!axes) return std::nullopt;
    v.axes = std::move(*axes);
  } else if (n.op->name == "transpose") {
    std::vector<Runs> axes;
    for (int64_t a : TransposePermutation(n.attrs.Get<TransposeParam>(), in.ndim()))
      axes.push_back(v.axes[a]);
    v.axes = std::move(axes);
  } else {  // slice
    const SliceBox box = MakeSliceBox(n.attrs.Get<SliceParam>(), in);
    for (int k = 0; k < in.ndim(); ++k) {
      if (box.out[k] != in[k] && !SliceAxis(v, k, box.begin[k], box.begin[k] + box.out[k]))
        return std::nullopt;
    }
  }
  return v;
}

// Whether a copy of v moves rows (the walk's innermost run contiguous in the root) in a walk a
// kernel takes (at most Shape::kMaxDims runs).
bool Copyable(const View& v) {
  const Runs walk = Walk(v);
  return walk.size() <= Shape::kMaxDims && (walk.empty() || walk.back().stride == 1);
}

// Whether v is the whole root (of `size` elements) in its order: a reshape of it.
bool IsWholeRoot(const View& v, int64_t size) {
  const Runs walk = Walk(v);
  return v.offset == 0 && (size == 1 ? walk.empty() : walk == Runs{{size, 1}});
}

class Composer {
 public:
  explicit Composer(const Graph& g)
      : g_(g), through_(g.nodes().size()), views_(g.nodes().size()), readers_(g.nodes().size()) {
    for (uint32_t n = 0; n < g.nodes().size(); ++n) {
      const Node& node = g.node(n);
      through_[n] = IsMove(node) && IsMove(g.node(node.inputs[0].node));
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        readers_[node.inputs[i].node].push_back(i == 0 ? n : kOther);
      }
    }
    for (const NodeEntry& e : g.outputs()) readers_[e.node].push_back(kOther);
    while (Settle()) {
    }
  }

  Graph Rewrite(int* composed) const {
    GraphRewrite r(g_);
    int count = 0;
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      if (!through_[n]) {
        r.Keep(n);
        continue;
      }
      if (!Materializes(n)) continue;  // read only by ops that compose through it: it goes
      const uint32_t now = r.Add(ReadOfRoot(n, r), {g_.EntryId({n, 0})});
      r.MapNode(n, now);
      r.MapEntry({n, 0}, {now, 0});
      ++count;
    }
    if (composed != nullptr) *composed = count;
    if (count == 0) return g_;
    return Prune(std::move(r).Finish());
  }

 private:
  const Shape& OutShape(uint32_t n) const { return g_.shapes()[g_.EntryId({n, 0})]; }

  // One round: every move node's view, then the cuts: a node whose output is copied where its
  // copy would not move rows (or needs too long a walk), and a node whose input is copied anyway
  // (composing would copy twice). Returns whether a cut was made (the views then change).
  bool Settle() {
    bool cut = false;
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      const Node& node = g_.node(n);
      if (!IsMove(node)) continue;
      const NodeEntry in = node.inputs[0];
      const Shape& in_shape = g_.shapes()[g_.EntryId(in)];
      if (through_[n]) {
        views_[n] =
            views_[in.node] ? After(node, in_shape, OutShape(n), *views_[in.node]) : std::nullopt;
        if (views_[n]) continue;
        through_[n] = false;
        cut = true;
      }
      views_[n] = After(node, in_shape, OutShape(n), Whole(in, in_shape));
    }
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
      if (through_[n] &&
          ((Materializes(n) && !Copyable(*views_[n])) || Materializes(g_.node(n).inputs[0].node))) {
        through_[n] = false;
        cut = true;
      }
    }
    return cut;
  }

  // Whether move node m's output is a graph output or read by an op that does not compose
  // through it.
  bool Materializes(uint32_t m) const {
    for (uint32_t n : readers_[m]) {
      if (n == kOther || !through_[n]) return true;
    }
    return false;
  }

  // Node n as one read of its chain's root: a reshape where that is all it is.
  Node ReadOfRoot(uint32_t n, const GraphRewrite& r) const {
    const View& v = *views_[n];
    Node read;
    read.name = g_.node(n).name;
    read.inputs = {r.Map(v.root)};
    const std::string shape = OutShape(n).ToString();
    if (IsWholeRoot(v, g_.shapes()[g_.EntryId(v.root)].Size())) {
      read.op = &GetOp("reshape");
      read.attrs = ParseAttrs(*read.op, {{"shape", shape}});
      return read;
    }
    std::vector<int64_t> walk, stride;  // at most Shape::kMaxDims runs (Copyable)
    for (const Run& run : Walk(v)) {
      walk.push_back(run.extent);
      stride.push_back(run.stride);
    }
    read.op = &GetOp("_strided_copy");
    read.attrs = ParseAttrs(*read.op, {{"shape", shape},
                                       {"walk", Shape(walk).ToString()},
                                       {"stride", Shape(stride).ToString()},
                                       {"offset", std::to_string(v.offset)}});
    return read;
  }

  const Graph& g_;
  std::vector<bool> through_;  // per node: a move op that reads its input as a view of the root
  std::vector<std::optional<View>> views_;  // per move node: where its output lies in its root
  // Per node: the nodes that read its output 0 as their input 0, kOther for any other read (an
  // input past the first, a graph output). Move ops have one output and read their data first.
  static constexpr uint32_t kOther = ~0u;
  std::vector<std::vector<uint32_t>> readers_;
};

}  // namespace

Graph ComposeMoves(const Graph& typed, int* composed) {
  WEFT_CHECK(typed.has_types()) << "ComposeMoves reads the shapes of a typed graph";
  return Composer(typed).Rewrite(composed);
}

}  // namespace weft
