#include "core/text.h"

#include <algorithm>
#include <cstdint>

namespace weft {

namespace {

bool IsUtf8Continuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Levenshtein distance by one rolling row: O(|a| |b|) time, O(|b|) memory.
size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string Abbreviate(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  while (cut > 0 && IsUtf8Continuation(text[cut])) --cut;
  return std::string(text.substr(0, cut)) + "... (" + std::to_string(text.size()) + " bytes)";
}

std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates,
                        size_t max_distance) {
  std::string best;
  size_t best_distance = max_distance + 1;
  for (const std::string& candidate : candidates) {
    const size_t length_gap = candidate.size() > name.size() ? candidate.size() - name.size()
                                                             : name.size() - candidate.size();
    if (length_gap >= best_distance) continue;  // the distance is at least the gap
    const size_t d = EditDistance(name, candidate);
    if (d < best_distance) best = candidate, best_distance = d;
  }
  return best;
}

std::string DidYouMean(std::string_view name, const std::vector<std::string>& candidates) {
  const std::string best = ClosestName(name, candidates);
  return best.empty() ? std::string() : "; did you mean '" + Abbreviate(best) + "'?";
}

std::string QuotedList(const std::vector<std::string>& names, size_t max_names) {
  if (names.empty()) return "(none)";
  std::string list;
  for (size_t i = 0; i < names.size() && i < max_names; ++i)
    list += (i == 0 ? "'" : ", '") + Abbreviate(names[i]) + "'";
  if (names.size() > max_names) list += ", ... (" + std::to_string(names.size()) + " in all)";
  return list;
}

bool IsUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    int more = 0;
    uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      more = 1, code = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      more = 2, code = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      more = 3, code = c & 0x07;
    } else {
      return false;  // a continuation byte first, or 0xf8 and above
    }
    if (i + more >= text.size()) return false;  // truncated
    for (int k = 1; k <= more; ++k) {
      const unsigned char b = static_cast<unsigned char>(text[i + k]);
      if ((b & 0xc0) != 0x80) return false;
      code = (code << 6) | (b & 0x3f);
    }
    static constexpr uint32_t kSmallest[] = {0, 0x80, 0x800, 0x10000};
    if (code < kSmallest[more] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
      return false;
    i += more + 1;
  }
  return true;
}

}  // namespace weft
