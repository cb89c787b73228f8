#include "weft/profiler.h"

#include "engine/engine.h"

namespace weft {

void Profiler::Start(const std::string& path) { engine::Engine::Get()->StartProfiling(path); }

void Profiler::Stop() { engine::Engine::Get()->StopProfiling(); }

bool Profiler::Running() { return engine::Engine::Get()->profiling(); }

}  // namespace weft
