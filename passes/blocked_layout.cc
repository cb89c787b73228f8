#include "passes/blocked_layout.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/rewrite.h"
#include "ops/nn/nn_params.h"
#include "ops/op.h"

namespace weft {
namespace {

// The images a window op or BatchNorm reads and writes as images, by input and output position,
// when it can take the blocked layout (null: it cannot).
struct ImageSlots {
  std::vector<int> inputs, outputs;
};

std::optional<ImageSlots> SlotsOf(const Node& n) {
  const std::string& op = n.op->name;
  if (op == "Convolution" || op == "_backward_Convolution") {
    const ConvParam& p = n.attrs.Get<ConvParam>();
    if (p.window.channels_last || p.window.blocked) return std::nullopt;
    if (op == "_backward_Convolution") return ImageSlots{{0, 1}, {0}};
    if (p.with_sum) return ImageSlots{{0, 3}, {0}};  // sum, after the bias it needs
    return ImageSlots{{0}, {0}};
  }
  if (op == "Pooling" || op == "_backward_Pooling") {
    const PoolParam& p = n.attrs.Get<PoolParam>();
    if (p.window.channels_last || p.window.blocked) return std::nullopt;
    return op == "Pooling" ? ImageSlots{{0}, {0}} : ImageSlots{{0, 1}, {0}};
  }
  if (op == "BatchNorm" || op == "_backward_BatchNorm") {
    const BatchNormParam& p = n.attrs.Get<BatchNormParam>();
    if (p.axis != 1 || p.blocked) return std::nullopt;
    if (op == "BatchNorm") return ImageSlots{{0}, {0}};
    if (p.act == BnAct::kRelu) return ImageSlots{{kBnOutGrad, kBnData, kBnOutput}, {0}};
    return ImageSlots{{kBnOutGrad, kBnData}, {0}};
  }
  return std::nullopt;
}

// An op whose every output element comes from the data inputs' elements at its own index (where
// they all have one shape: Blind checks): its images keep the layout of its inputs.
bool LayoutBlind(const Node& n) {
  if (n.op->HasEffects()) return false;
  switch (n.op->pointwise.kind) {
    case PointwiseKind::kUnary:
    case PointwiseKind::kUnaryBackward:
    case PointwiseKind::kBinary:
    case PointwiseKind::kBinaryBackward:
    case PointwiseKind::kTernary:
    case PointwiseKind::kAddN:
    case PointwiseKind::kCast:
      return true;
    default:
      return false;
  }
}

class Blocker {
 public:
  explicit Blocker(const Graph& g) : g_(g), parent_(g.num_entries()), bad_(g.num_entries()) {
    std::iota(parent_.begin(), parent_.end(), 0u);
    std::vector<bool> external(g.num_entries(), false);
    for (uint32_t n : g.ArgumentNodes()) external[g.EntryId({n, 0})] = true;
    for (const NodeEntry& e : g.outputs()) external[g.EntryId(e)] = true;
    image_.resize(g.num_entries());
    for (uint32_t e = 0; e < g.num_entries(); ++e)
      image_[e] = !external[e] && BlockedImage(g.shapes()[e]) &&
                  (g.dtypes()[e] == DType::kFloat32 || g.dtypes()[e] == DType::kBFloat16);
  }

  // Per node: whether it takes the blocked layout.
  std::vector<bool> Run() {
    slots_.resize(g_.nodes().size());
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) Visit(n);
    for (bool changed = true; changed;) {  // drop what fails until nothing does
      changed = false;
      for (uint32_t n = 0; n < g_.nodes().size(); ++n) {
        if (slots_[n].empty() || AllGood(slots_[n])) continue;
        for (uint32_t e : slots_[n]) changed = Spoil(e) || changed;
        slots_[n].clear();
      }
    }
    std::vector<bool> blocked(g_.nodes().size(), false);
    for (uint32_t n = 0; n < g_.nodes().size(); ++n) blocked[n] = !slots_[n].empty();
    return blocked;
  }

 private:
  uint32_t Root(uint32_t e) {
    while (parent_[e] != e) e = parent_[e] = parent_[parent_[e]];
    return e;
  }
  void Join(uint32_t a, uint32_t b) {
    a = Root(a), b = Root(b);
    if (a == b) return;
    parent_[b] = a;
    bad_[a] = bad_[a] || bad_[b];
  }
  // Marks e's component bad; true if it was not.
  bool Spoil(uint32_t e) {
    const uint32_t r = Root(e);
    if (bad_[r]) return false;
    bad_[r] = true;
    return true;
  }
  bool AllGood(const std::vector<uint32_t>& entries) {
    for (uint32_t e : entries) {
      if (bad_[Root(e)]) return false;
    }
    return true;
  }

  // The entries node n reads for their values (not those it reads for their shape or dtype).
  std::vector<uint32_t> ValueInputs(uint32_t n) const {
    const Node& node = g_.node(n);
    std::vector<uint32_t> in;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.op->ReadsInputValues(node.attrs, static_cast<int>(i)))
        in.push_back(g_.EntryId(node.inputs[i]));
    }
    return in;
  }

  void Visit(uint32_t n) {
    const Node& node = g_.node(n);
    if (node.is_variable()) return;
    std::vector<uint32_t> touched = ValueInputs(n);
    for (uint32_t o = 0; o < g_.num_outputs(n); ++o) touched.push_back(g_.EntryId({n, o}));
    if (LayoutBlind(node)) return Blind(touched);
    if (const std::optional<ImageSlots> slots = SlotsOf(node)) return Slots(n, *slots, touched);
    for (uint32_t e : touched) {
      if (image_[e]) Spoil(e);  // read or written as NCHW
    }
  }

  // A layout-blind op: its images are one component, and it needs all of them to be images of
  // one shape (a broadcast, or an argument among them, keeps them NCHW).
  void Blind(const std::vector<uint32_t>& touched) {
    bool any = false, all = true;
    for (uint32_t e : touched) {
      any = any || image_[e];
      all = all && image_[e] && g_.shapes()[e] == g_.shapes()[touched[0]];
    }
    if (!any) return;
    for (uint32_t e : touched) {
      if (image_[e]) Join(touched[0], e);
    }
    if (!all) {
      for (uint32_t e : touched) {
        if (image_[e]) Spoil(e);
      }
    }
  }

  // A window op or BatchNorm: blocked if its slots' images all stay good. It takes every slot of
  // BlockedImage's shape blocked, so one that cannot be (a graph argument or output, float64)
  // keeps it NCHW, and an image it touches outside its slots keeps that image NCHW.
  void Slots(uint32_t n, const ImageSlots& slots, const std::vector<uint32_t>& touched) {
    const Node& node = g_.node(n);
    std::vector<uint32_t> mine;
    for (int i : slots.inputs) mine.push_back(g_.EntryId(node.inputs[i]));
    for (int o : slots.outputs) mine.push_back(g_.EntryId({n, static_cast<uint32_t>(o)}));
    bool can = true;
    for (uint32_t e : mine) can = can && (image_[e] || !BlockedImage(g_.shapes()[e]));
    for (uint32_t e : touched) {
      const bool slot = std::find(mine.begin(), mine.end(), e) != mine.end();
      if (image_[e] && (!slot || !can)) Spoil(e);
      if (image_[e] && slot && can) slots_[n].push_back(e);
    }
  }

  const Graph& g_;
  std::vector<bool> image_;       // per entry: a BlockedImage, float32 or bfloat16, not external
  std::vector<uint32_t> parent_;  // union-find over entries
  std::vector<bool> bad_;         // per root: its component stays NCHW
  std::vector<std::vector<uint32_t>> slots_;  // per window op or BatchNorm: its images
};

}  // namespace

Graph BlockedLayout(const Graph& typed, int* blocked) {
  const std::vector<bool> block = Blocker(typed).Run();
  GraphRewrite r(typed);
  int count = 0;
  for (uint32_t n = 0; n < typed.nodes().size(); ++n) {
    if (!block[n]) {
      r.Keep(n);
      continue;
    }
    Node node = WithAttrs(typed.node(n), {{"layout", "NCHW16c"}});
    for (NodeEntry& e : node.inputs) e = r.Map(e);
    const uint32_t now = r.AddLike(std::move(node), n);
    r.MapNode(n, now);
    for (uint32_t o = 0; o < typed.num_outputs(n); ++o) r.MapEntry({n, o}, {now, o});
    ++count;
  }
  if (blocked != nullptr) *blocked = count;
  return std::move(r).Finish();
}

}  // namespace weft
