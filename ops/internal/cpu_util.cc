#include "ops/internal/cpu_util.h"

#include <omp.h>

#include <algorithm>
#include <memory>
#include <mutex>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "core/env.h"
#include "engine/engine.h"

namespace weft::cpu {

int IntraOpThreads() {
  static const int threads = [] {
    const int workers = engine::EngineOptions::FromEnv().cpu_workers;
    return GetEnvInt("WEFT_CPU_OP_THREADS", std::max(1, NumCores() / std::max(1, workers)), 1, 1024);
  }();
  return threads;
}

void ParallelForSplit(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  const int threads = IntraOpThreads();
  // One arena per calling thread, so that engine workers do not share (or wait on) TBB threads.
  thread_local std::unique_ptr<oneapi::tbb::task_arena> arena;
  if (!arena) arena = std::make_unique<oneapi::tbb::task_arena>(threads);
  arena->execute([&] {
    oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<int64_t>(0, n, std::max<int64_t>(grain, 1)),
                              [&](const oneapi::tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
  });
}

void ConfigureOpenMPForThisThread() {
  thread_local bool configured = false;
  if (!configured) {
    omp_set_num_threads(IntraOpThreads());
    configured = true;
  }
}

void CheckNumInputs(const std::vector<Shape>& in, size_t n, const char* op) {
  if (in.size() != n) WEFT_THROW(op << ": expected " << n << " input(s), found " << in.size());
}

void CheckSameShape(const Shape& a, const Shape& b, const char* what) {
  if (a != b) WEFT_THROW(what << ": expected equal shapes, found " << a << " and " << b);
}

}  // namespace weft::cpu
