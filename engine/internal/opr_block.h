// One pushed op inside the threaded engine, from push to completion.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "core/device.h"
#include "engine/engine.h"
#include "engine/internal/failure_log.h"
#include "engine/internal/profiler.h"

namespace weft::engine {

class ThreadedVar;

// The vars an op declared, deduplicated: writes first, then reads. Up to kInline vars are stored
// in the block itself; more (an n-ary sum, a bulk segment) go to the heap.
class OprVars {
 public:
  static constexpr size_t kInline = 6;
  // Copies and deduplicates; a var in both lists is a write. Throws weft::Error on a null var, a
  // var of another engine (`owner`) or a deleted var (CheckVar); `name` is the op's, for the
  // message. Runs before the op is appended to any var, so a rejected push leaves no trace.
  void Assign(VarList reads, VarList writes, const void* owner, const char* name);
  std::span<ThreadedVar* const> writes() const { return {data(), num_writes_}; }
  std::span<ThreadedVar* const> reads() const { return {data() + num_writes_, num_reads_}; }
  std::span<ThreadedVar* const> all() const { return {data(), num_reads_ + num_writes_}; }

 private:
  ThreadedVar* const* data() const { return heap_ ? heap_.get() : inline_.data(); }
  ThreadedVar** mutable_data() { return heap_ ? heap_.get() : inline_.data(); }

  std::array<ThreadedVar*, kInline> inline_;
  std::unique_ptr<ThreadedVar*[]> heap_;
  size_t num_reads_ = 0;
  size_t num_writes_ = 0;
};

struct OprBlock {
  SyncFn sync;  // exactly one of sync/async is set
  AsyncFn async;
  OprVars vars;
  Device device;
  FnProperty prop = FnProperty::kNormal;
  int priority = 0;
  const char* name = nullptr;
  bool deletes_var = false;  // DeleteVariable's op: the var is retired when it completes
  bool no_skip = false;      // runs even when a var holds an error (deleters, waits)
  // The failure of an input, found when a var granted the op (not when the op runs, so that a
  // WaitForVar pushed after this op cannot clear it first): the op is skipped and passes it on.
  // Set by the first granting thread to find one (CAS); the var's error slot keeps it alive.
  std::atomic<Failure*> inherited{nullptr};
  // Device ordering (engine/device_backend.h): set when the op ran with a backend present.
  bool device_sync = true;        // false for WaitForVar's op, which captures the writer instead
  bool ran = false;               // the backend's waits were made: its completion must be recorded
  GpuStream* stream = nullptr;    // the worker's stream (null: a CPU op)
  bool device_work_done = false;  // completed by OnComplete::AfterDeviceWork
  ProfileStamp profile;           // when and where it started, if the profiler traces it

  // Vars not yet granted, plus one held by the pusher until every var has been appended, so the
  // op cannot be dispatched half-registered. The op is ready when this reaches zero; acq_rel
  // makes every grant (and what the granting op wrote) visible to the thread that runs it.
  std::atomic<int> wait{0};
  bool DecrementWait() { return wait.fetch_sub(1, std::memory_order_acq_rel) == 1; }
};

}  // namespace weft::engine
