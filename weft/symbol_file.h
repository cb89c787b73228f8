// Saving and loading a Symbol's JSON form (graph/symbol.h) as a file. Save writes a temporary
// file and renames it, so a failed save never leaves a half-written one.
//
//   SaveSymbol("mlp.json", net);
//   Symbol net2 = LoadSymbol("mlp.json");   // throws weft::Error naming the file and the problem
//                                            // (a directory, not a file; bad JSON:
//                                            Symbol::FromJson)
#pragma once

#include <string>

#include "graph/symbol.h"

namespace weft {

void SaveSymbol(const std::string& path, const Symbol& symbol);
Symbol LoadSymbol(const std::string& path);

}  // namespace weft
