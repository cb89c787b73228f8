#include "ops/gpu/fusion/kernel_parts.h"

#include <algorithm>
#include <map>
#include <utility>

namespace weft::gpu {
namespace {

using Key = std::pair<Operand::Kind, uint32_t>;
Key KeyOf(const Operand& o) { return {o.kind, o.id}; }

// The operands part `p` reads (its steps' data arguments and what its stores read), each once, in
// order of first read.
std::vector<Operand> ReadsOf(const KernelPart& part, const StepCode& code) {
  std::vector<Operand> reads;
  const auto add = [&](const Operand& o) {
    if (std::find(reads.begin(), reads.end(), o) == reads.end()) reads.push_back(o);
  };
  for (uint32_t s : part.steps) {
    for (const Operand& o : code.Reads(s)) add(o);
    for (const StepCode::Store& st : code.Stores(s)) add(st.from);
  }
  return reads;
}

}  // namespace

std::vector<KernelPart> SplitIntoParts(const FusedGroup& group, const KernelPlan& plan,
                                       const StepCode& code, size_t part_size) {
  std::vector<KernelPart> parts;
  size_t size = 0;  // of the last part
  for (uint32_t s = 0; s < group.steps.size(); ++s) {
    if (!plan.live[s]) continue;
    const size_t step_size = code.Defines(s).size() + code.Stores(s).size();
    if (parts.empty() || (size + step_size > part_size && size > 0)) parts.emplace_back(), size = 0;
    parts.back().steps.push_back(s);
    size += step_size;
  }
  if (parts.size() < 2) return parts;
  std::map<Key, int> defined_in, last_read_in;
  for (size_t p = 0; p < parts.size(); ++p) {
    for (uint32_t s : parts[p].steps) {
      for (const Operand& o : code.Defines(s)) defined_in[KeyOf(o)] = static_cast<int>(p);
    }
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    for (const Operand& o : ReadsOf(parts[p], code)) {
      last_read_in[KeyOf(o)] = static_cast<int>(p);
      auto d = defined_in.find(KeyOf(o));
      if (d == defined_in.end() || d->second != static_cast<int>(p)) parts[p].ins.push_back(o);
    }
  }
  for (size_t p = 0; p < parts.size(); ++p) {
    for (uint32_t s : parts[p].steps) {
      for (const Operand& o : code.Defines(s)) {
        auto r = last_read_in.find(KeyOf(o));
        if (r != last_read_in.end() && r->second > static_cast<int>(p)) parts[p].outs.push_back(o);
      }
    }
  }
  return parts;
}

}  // namespace weft::gpu
