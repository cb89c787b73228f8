// The workers of one device (a GPU), for the threaded engine: a few compute workers, one
// host-to-device and one device-to-host copy worker, and a prioritized worker, each owning a
// stream made by the device's backend. Compute ops go to the compute workers' shared queue, so
// independent ops spread over their streams; copies in each direction keep their own stream, so
// they overlap compute.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/device_backend.h"
#include "engine/internal/worker_pool.h"
#include "engine/profiler_hooks.h"

namespace weft::engine {

class Profiler;

class DeviceWorkers {
 public:
  // Makes the streams now (on the calling thread, so errors reach it); threads start on first use.
  DeviceWorkers(DeviceBackend& backend, Device device, int first_worker_id,
                const WorkerPool::Runner& run);
  ~DeviceWorkers();  // Stop()s, then destroys the streams

  void Submit(OprBlock* op);
  // Lets the workers finish their queues, joins them, and waits for their streams. Idempotent.
  void Stop();
  // Blocks until every stream's queued device work is done.
  void Synchronize();
  int num_workers() const;
  void NameTracks(Profiler& profiler) const;
  // Each worker's stream, named after it: "gpu:0 compute 1", "gpu:0 copy h2d", "gpu:0 copy d2h",
  // "gpu:0 priority" (with the worker's index after it when its pool has several).
  void AppendStreams(std::vector<NamedStream>& streams) const;

 private:
  std::unique_ptr<WorkerPool> MakePool(const std::string& name, StreamKind kind, int& next_id,
                                       const WorkerPool::Runner& run);

  DeviceBackend& backend_;
  const Device device_;
  std::vector<GpuStream*> streams_;  // every worker's, in pool order
  std::unique_ptr<WorkerPool> compute_, copy_to_, copy_from_, priority_;
  bool stopped_ = false;
};

}  // namespace weft::engine
