#include "graph/strongly_connected.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"

namespace weft {

namespace {

// Tarjan's algorithm with an explicit call stack: each vertex gets a discovery index and the
// lowest index it reaches through the vertices still on the component stack; a vertex whose low
// equals its index closes a component, the stack from it up.
class Tarjan {
 public:
  explicit Tarjan(const std::vector<std::vector<uint32_t>>& next)
      : next_(next),
        index_(next.size(), kUnvisited),
        low_(next.size(), 0),
        on_stack_(next.size(), false) {}

  std::vector<std::vector<uint32_t>> Run() {
    for (uint32_t root = 0; root < next_.size(); ++root) {
      if (index_[root] == kUnvisited) Visit(root);
    }
    return std::move(components_);
  }

 private:
  static constexpr uint32_t kUnvisited = std::numeric_limits<uint32_t>::max();

  void Discover(uint32_t v) {
    index_[v] = low_[v] = counter_++;
    stack_.push_back(v);
    on_stack_[v] = true;
    calls_.push_back({v, 0});
  }

  // The depth-first search from `root`, one edge per step.
  void Visit(uint32_t root) {
    Discover(root);
    while (!calls_.empty()) {
      auto& [u, i] = calls_.back();
      if (i == next_[u].size()) {
        Return();
        continue;
      }
      const uint32_t v = next_[u][i++];
      WEFT_CHECK_LT(v, next_.size()) << "strongly connected components: vertex " << u
                                     << " has an edge to " << v << ", which is not a vertex";
      if (index_[v] == kUnvisited) {
        Discover(v);
      } else if (on_stack_[v]) {
        low_[u] = std::min(low_[u], index_[v]);
      }
    }
  }

  // The vertex on top of the call stack is done: its caller inherits its low, and it closes a
  // component when nothing it reaches on the stack was found before it.
  void Return() {
    const uint32_t done = calls_.back().first;
    calls_.pop_back();
    if (!calls_.empty())
      low_[calls_.back().first] = std::min(low_[calls_.back().first], low_[done]);
    if (low_[done] != index_[done]) return;
    std::vector<uint32_t> component;
    for (uint32_t w = kUnvisited; w != done;) {
      w = stack_.back();
      stack_.pop_back();
      on_stack_[w] = false;
      component.push_back(w);
    }
    components_.push_back(std::move(component));
  }

  const std::vector<std::vector<uint32_t>>& next_;
  std::vector<uint32_t> index_, low_;               // per vertex
  std::vector<bool> on_stack_;                      // per vertex
  std::vector<uint32_t> stack_;                     // vertices of components not closed yet
  std::vector<std::pair<uint32_t, size_t>> calls_;  // (vertex, next successor to visit)
  uint32_t counter_ = 0;
  std::vector<std::vector<uint32_t>> components_;
};

}  // namespace

std::vector<std::vector<uint32_t>> StronglyConnectedComponents(
    const std::vector<std::vector<uint32_t>>& successors) {
  return Tarjan(successors).Run();
}

}  // namespace weft
