// Fuzz target: weft::LoadSymbol of a graph's JSON form, and what the symbol it accepts can do.
#include <string>

#include "core/error.h"
#include "fuzz/targets.h"
#include "weft/symbol_file.h"

namespace weft::fuzz {

int GraphJson(const uint8_t* data, size_t size) {
  static const TempFile file("graph.json");
  file.Write(data, size);
  Symbol symbol;
  try {
    symbol = LoadSymbol(file.path());
  } catch (const Error&) {
    return 0;
  }
  // An accepted graph writes its JSON form, which reads back as the same graph (the same text).
  const std::string json = symbol.ToJson();
  if (Symbol::FromJson(json).ToJson() != json) Fail("a loaded graph's JSON does not round-trip");
  (void)symbol.ListArguments();
  (void)symbol.ListOutputs();
  try {
    (void)symbol.ToGraph();
  } catch (const Error&) {
  }
  return 0;
}

}  // namespace weft::fuzz
