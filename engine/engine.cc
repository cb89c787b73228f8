#include "engine/engine.h"

#include <atomic>
#include <cstdlib>

#include "core/env.h"
#include "core/error.h"
#include "engine/internal/naive_engine.h"
#include "engine/internal/threaded_engine.h"

namespace weft::engine {

EngineOptions EngineOptions::FromEnv() {
  EngineOptions options;
  options.cpu_workers = GetEnvInt("WEFT_CPU_WORKERS", NumCores(), 1, 1024);
  options.cpu_priority_workers = GetEnvInt("WEFT_CPU_PRIORITY_WORKERS", 1, 1, 1024);
  options.profile_path = GetEnvString("WEFT_PROFILE", "");
  return options;
}

EngineKind EngineKindFromEnv() {
  std::string name = GetEnvString("WEFT_ENGINE", "threaded");
  if (name == "threaded") return EngineKind::kThreaded;
  if (name == "naive") return EngineKind::kNaive;
  WEFT_THROW("environment variable WEFT_ENGINE: expected 'threaded' or 'naive', found '" << name
                                                                                         << "'");
}

std::unique_ptr<Engine> CreateEngine(EngineKind kind, const EngineOptions& options) {
  if (kind == EngineKind::kNaive) return std::make_unique<NaiveEngine>(options);
  return std::make_unique<ThreadedEngine>(options);
}

namespace {

Engine* process_engine = nullptr;

void ShutdownAtExit() { process_engine->Shutdown(); }

}  // namespace

Engine* Engine::Get() {
  // Never destroyed, so objects destroyed at exit can still reach it (a push after shutdown is a
  // weft::Error they can catch, never a dangling pointer). Shut down at exit: queued work drains
  // and the workers are joined, before the statics constructed earlier are destroyed.
  static Engine* const engine = [] {
    process_engine = CreateEngine(EngineKindFromEnv(), EngineOptions::FromEnv()).release();
    std::atexit(ShutdownAtExit);
    return process_engine;
  }();
  return engine;
}

namespace {

std::atomic<uint64_t> write_stamps{0};  // the last stamp given, process-wide

// Stamped before the op is queued: a reader pushed after this push returns runs after the write.
void CountWrites(VarList writes) {
  if (writes.size() == 0) return;
  const uint64_t stamp = write_stamps.fetch_add(1, std::memory_order_relaxed) + 1;
  for (VarHandle v : writes)
    if (v != nullptr) v->NoteWritePushed(stamp);
}

}  // namespace

uint64_t LastWritePushed(VarHandle var) { return var->last_write(); }

void Engine::PushAsync(AsyncFn fn, Device device, VarList reads, VarList writes, FnProperty prop,
                       int priority, const char* name) {
  WEFT_CHECK(fn != nullptr) << "op '" << (name ? name : "op") << "': the function is empty";
  CountWrites(writes);
  Push(nullptr, std::move(fn), PushArgs{device, reads, writes, prop, priority, name});
}

void Engine::PushSync(SyncFn fn, Device device, VarList reads, VarList writes, FnProperty prop,
                      int priority, const char* name) {
  WEFT_CHECK(fn != nullptr) << "op '" << (name ? name : "op") << "': the function is empty";
  CountWrites(writes);
  Push(std::move(fn), nullptr, PushArgs{device, reads, writes, prop, priority, name});
}

}  // namespace weft::engine
