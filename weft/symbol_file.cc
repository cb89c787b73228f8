#include "weft/symbol_file.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace weft {

void SaveSymbol(const std::string& path, const Symbol& symbol) {
  const std::string json = symbol.ToJson();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << json;
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      WEFT_THROW("SaveSymbol: cannot write '" << tmp << "'");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    WEFT_THROW("SaveSymbol: cannot rename '" << tmp << "' to '" << path << "'");
  }
}

Symbol LoadSymbol(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) WEFT_THROW("LoadSymbol: cannot open '" << path << "'");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return Symbol::FromJson(text.str());
  } catch (const Error& e) {
    WEFT_THROW("LoadSymbol: '" << path << "': " << e.what());
  }
}

}  // namespace weft
