// Parsing JSON that comes from outside (a model file's header, a saved graph): nesting is limited
// (a parser or printer that recurses per level would overflow the stack on 100,000 of them, and no
// weft format nests more than a few), a key repeated in one object is refused rather than silently
// resolved, and whatever a message quotes of the input is abbreviated (core/text.h). Time and
// memory are linear in the text.
//
//   ParsedJson parsed = ParseJson(text, /*max_depth=*/4);
//   if (!parsed.ok()) WEFT_THROW("Load '" << path << "': " << parsed.error);
//   ... parsed.value ...
//   WEFT_THROW("expected a list, found " << JsonForMessage(value));   // at most a few dozen bytes
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace weft {

struct ParsedJson {
  nlohmann::json value;  // null unless ok()
  std::string error;     // why the text was refused: "invalid JSON: ...", "JSON nested deeper than
                         // ...", "duplicate key '...'"; empty when it was not
  bool ok() const { return error.empty(); }
};

// `max_depth` counts the arrays and objects open at once: {"a": [1]} has depth 2.
ParsedJson ParseJson(std::string_view text, int max_depth);

// The value as compact JSON, abbreviated to a few dozen bytes (with its full length when cut).
// The value must come from ParseJson (or be as shallow): printing recurses per level.
std::string JsonForMessage(const nlohmann::json& value);

}  // namespace weft
