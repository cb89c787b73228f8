#include "weft/symbol_file.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file.h"

namespace weft {

void SaveSymbol(const std::string& path, const Symbol& symbol) {
  try {
    WriteFileAtomically(path, symbol.ToJson());
  } catch (const Error& e) {
    WEFT_THROW("SaveSymbol: " << e.what());
  }
}

Symbol LoadSymbol(const std::string& path) {
  std::ifstream in;
  if (auto why = OpenForReading(path, in))
    WEFT_THROW("LoadSymbol: cannot open '" << path << "': " << *why);
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return Symbol::FromJson(text.str());
  } catch (const Error& e) {
    WEFT_THROW("LoadSymbol: '" << path << "': " << e.what());
  }
}

}  // namespace weft
