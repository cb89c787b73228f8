// Text about untrusted input, for error messages: a bounded quote of a value (a file may hold a
// 10 MB attribute or name; a message shows a few dozen bytes of it and says how long it was), and
// the "did you mean" suggestion for a misspelled name.
//
//   WEFT_THROW("attribute 'num_hidden': expected an integer, found '" << Abbreviate(value) << "'");
//       // ... found 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx... (10000000 bytes)'
//   WEFT_THROW("unknown op '" << Abbreviate(name) << "'" << DidYouMean(name, ListOps()));
//       // ... unknown op 'rleu'; did you mean 'relu'?
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

// How many bytes of a value a message quotes.
inline constexpr size_t kMaxQuotedBytes = 40;

// `text` itself when it has at most `max_bytes` bytes; else its first `max_bytes` bytes (cut
// before a UTF-8 sequence that would not fit), "...", and its length: "[[[[... (200000 bytes)".
std::string Abbreviate(std::string_view text, size_t max_bytes = kMaxQuotedBytes);

// The candidate closest to `name` by edit distance, if one is at most `max_distance` edits away
// (the first of the closest, in the candidates' order); empty otherwise. Time is bounded by the
// candidates' lengths: a candidate whose length differs by more than `max_distance` is skipped.
std::string ClosestName(std::string_view name, const std::vector<std::string>& candidates,
                        size_t max_distance = 2);

// "; did you mean 'relu'?" for ClosestName's answer, or "" when there is none.
std::string DidYouMean(std::string_view name, const std::vector<std::string>& candidates);

// Whether `text` is valid UTF-8 (what JSON text and ONNX's strings must be): no stray
// continuation byte, no truncated, overlong or surrogate sequence, nothing past U+10FFFF.
bool IsUtf8(std::string_view text);

// "'a', 'b', 'c'" (each abbreviated), "(none)" for no names; past `max_names`, the count of the
// rest: "'a', 'b', ... (100000 in all)".
std::string QuotedList(const std::vector<std::string>& names, size_t max_names = 20);

}  // namespace weft
