// Errors that kernels find in their inputs (a label that is not a class, an index outside a
// table), raised as a weft::Error at the next wait on the op's outputs, as a CPU op's exception
// is: with no host wait in the op and no device-side assert (the CUDA context stays usable).
//
// How: a GPU op that checks an input asks its stream for a slot (GpuStream::ErrorSlot, with the
// message it would throw on the CPU). Its kernels note bad items in the slot (an atomicMin in
// device memory, so the smallest bad item wins, as the CPU's first); then a one-thread kernel
// writes that item, its value and the op's ticket into the slot's report, pinned host memory the
// device writes, and marks the check done (ops/gpu/kernels/device_error.cuh). The slot's record
// travels with the op's completion (engine/gpu/stream_point.h), and to the completions of the
// GPU ops that depend on it (they are already queued when the error happens, so they run). A
// host wait on a completion reads its records once the wait is over:
//   - WaitForVar on a var the op (or such a dependent op) wrote raises the error, once per var;
//   - a CPU op that reads or writes such a var fails with it, as with an input's error;
//   - WaitForAll raises an error no wait has raised since the last WaitForAll, and retires them
//     all (no later wait raises them).
// One difference from a CPU op's error: the WaitForVar that raises it does not clear it for the
// ops that access the var after (a CPU error slot is cleared): they carry it on, until WaitForAll.
// Records are pooled per device, never freed (process lifetime, as the event pool), and reused
// only once the check of their last use is done, so a kernel never writes a record another use
// reads.
//
//   gpu::DeviceErrorSlot slot = stream.ErrorSlot([](int64_t row, double v) { return ...; });
//   // kernels(..., slot), then ReportFirstBad(slot, values) on the same stream
//   gpu::DeviceErrors errors = stream.TakeErrors();      // the op's completion takes them
//   ... after a host wait covered that work:
//   if (std::exception_ptr e = errors.TakeFailure()) std::rethrow_exception(e);
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "core/small_vector.h"
#include "engine/function.h"

namespace weft::gpu {

// A check's report, in pinned host memory the device writes (ReportFirstBad). The same layout as
// GpuErrorReport in ops/gpu/kernels/params.cuh (ops/gpu checks it).
struct DeviceErrorReport {
  uint64_t failed;  // the ticket of the last use that found a bad item
  uint64_t done;    // the ticket of the last use whose check is complete; written last
  int64_t item;     // that use's smallest bad item
  double value;     // and its value
};

// What an op's kernels get, by value: the same layout as GpuErrorSlot in params.cuh.
struct DeviceErrorSlot {
  unsigned long long* first_bad;  // device memory: the smallest bad item noted, ~0 while none
  DeviceErrorReport* report;      // the report's device address
  uint64_t ticket;                // this use's, unique in the process
};

// The op's message for its smallest bad item and that item's value: what its CPU compute throws.
using DeviceErrorMessage = engine::Function<std::string(int64_t item, double value)>;

// One check by one op (device_error.cc).
class DeviceErrorRecord;

// A record for a check by an op on `device`, with one reference (the caller's). `fresh`: its
// `first_bad` has never been set, and the caller must set it to ~0 on the stream the check's
// kernels run on, before them.
struct AcquiredRecord {
  DeviceErrorRecord* record;
  DeviceErrorSlot slot;
  bool fresh;
};
AcquiredRecord AcquireErrorRecord(int device, DeviceErrorMessage message);

// The records some device work depends on: its own op's, and those of the work before it that
// may have failed (no duplicates). Holds a reference to each. Not thread-safe: filled by one
// thread, then only read (TakeFailure) once shared.
class DeviceErrors {
 public:
  DeviceErrors() = default;
  DeviceErrors(DeviceErrors&& other) noexcept;
  DeviceErrors& operator=(DeviceErrors&& other) noexcept;
  DeviceErrors(const DeviceErrors&) = delete;
  DeviceErrors& operator=(const DeviceErrors&) = delete;
  ~DeviceErrors() { Clear(); }

  bool empty() const { return records_.empty(); }
  // Takes over the caller's reference to `record`.
  void Add(DeviceErrorRecord* record);
  // Adds those of `from` that may still raise: not retired, and failed or not known to be clean
  // yet (a clean check that is done is left out, so the lists stay as short as the work in
  // flight).
  void Inherit(const DeviceErrors& from);
  // Only once the work these records belong to is done (a host wait covered it): the error of
  // the earliest that failed and is not retired, for the caller to raise (marked raised, so
  // WaitForAll leaves it); null if none. A check that is still not done never will be (its op
  // failed before the check's last kernel): its record is dropped from the pool.
  std::exception_ptr TakeFailure() const;
  void Clear();

 private:
  SmallVector<DeviceErrorRecord*, 2> records_;
};

// For WaitForAll, after every stream's work is done: the error of the earliest check that failed
// and that no wait has raised (null if none); retires every failed check, so no wait raises it
// again.
std::exception_ptr RetireDeviceErrors();

}  // namespace weft::gpu
