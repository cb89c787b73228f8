#include "engine/internal/device_ordering.h"

#include <utility>

#include "core/error.h"
#include "core/mutex.h"
#include "engine/internal/profiler.h"
#include "engine/internal/threaded_var.h"

namespace weft::engine {

DeviceOrdering::DeviceOrdering(DeviceBackend* backend, int first_worker_id, WorkerPool::Runner run,
                               const std::atomic<bool>& accepting, Profiler* profiler)
    : backend_(backend),
      run_(std::move(run)),
      accepting_(accepting),
      profiler_(profiler),
      next_worker_id_(first_worker_id) {}

DeviceWorkers* DeviceOrdering::Workers(int device) {
  WEFT_CHECK(device >= 0 && device < kMaxGpus)
      << "expected a GPU id in [0, " << kMaxGpus << "), found " << device;
  if (DeviceWorkers* w = workers_[device].load(std::memory_order_acquire)) return w;
  MutexLock lock(&mu_);
  if (DeviceWorkers* w = workers_[device].load(std::memory_order_acquire)) return w;
  WEFT_CHECK(accepting_.load()) << "GPU work pushed after the engine was shut down";
  auto workers =
      std::make_unique<DeviceWorkers>(*backend_, Device::Gpu(device), next_worker_id_, run_);
  next_worker_id_ += workers->num_workers();
  if (profiler_) workers->NameTracks(*profiler_);
  workers_[device].store(workers.get(), std::memory_order_release);
  owned_.push_back(std::move(workers));
  return owned_.back().get();
}

// Vars no device op has touched cost one load.
void DeviceOrdering::Prepare(OprBlock* op, GpuStream* stream) {
  op->ran = true;
  op->stream = stream;
  const RunContext ctx{op->device, stream, -1};
  for (ThreadedVar* v : op->vars.writes()) {
    if (v->sync().state.load(std::memory_order_acquire)) backend_->WaitForAll(ctx, v->sync());
  }
  for (ThreadedVar* v : op->vars.reads()) {
    if (v->sync().state.load(std::memory_order_acquire)) backend_->WaitForWriter(ctx, v->sync());
  }
  if (stream == nullptr && !op->no_skip) RaiseDeviceError(*op);
}

void DeviceOrdering::RaiseDeviceError(const OprBlock& op) {
  for (ThreadedVar* v : op.vars.all()) {
    if (!v->sync().state.load(std::memory_order_acquire)) continue;
    if (std::exception_ptr error = backend_->TakeWriterError(v->sync()))
      std::rethrow_exception(error);
  }
}

// A device op's work is done when the event recorded now on its stream is; a CPU op that wrote
// a var waited for all of the var's device work, and so did an op completed AfterDeviceWork
// (engine.h), unless its vars carry device errors for the completion to pass on.
std::exception_ptr DeviceOrdering::Complete(OprBlock* op) {
  try {
    if (op->stream == nullptr || (op->device_work_done && !CarriesErrors(*op))) {
      for (ThreadedVar* v : op->vars.writes()) {
        if (v->sync().state.load(std::memory_order_acquire))
          backend_->SetWriter(v->sync(), nullptr);
      }
      return nullptr;
    }
    Completion done = backend_->RecordCompletion(RunContext{op->device, op->stream, -1});
    for (ThreadedVar* v : op->vars.all()) {
      if (v->sync().state.load(std::memory_order_acquire)) backend_->CarryErrors(done, v->sync());
    }
    for (ThreadedVar* v : op->vars.writes()) backend_->SetWriter(v->sync(), done);
    for (ThreadedVar* v : op->vars.reads()) backend_->AddReader(v->sync(), done);
    backend_->Release(done);
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

bool DeviceOrdering::CarriesErrors(const OprBlock& op) {
  for (ThreadedVar* v : op.vars.all()) {
    if (v->sync().state.load(std::memory_order_acquire) && backend_->CarriesErrors(v->sync()))
      return true;
  }
  return false;
}

void DeviceOrdering::Synchronize() {
  MutexLock lock(&mu_);
  for (auto& workers : owned_) workers->Synchronize();
}

std::vector<NamedStream> DeviceOrdering::Streams() {
  std::vector<NamedStream> streams;
  MutexLock lock(&mu_);
  for (auto& workers : owned_) workers->AppendStreams(streams);
  return streams;
}

void DeviceOrdering::StopKeeping() {
  MutexLock lock(&mu_);
  for (auto& workers : owned_) workers->Stop();
}

void DeviceOrdering::Stop() {
  std::vector<std::unique_ptr<DeviceWorkers>> owned;
  {
    MutexLock lock(&mu_);
    for (auto& slot : workers_) slot.store(nullptr, std::memory_order_release);
    owned.swap(owned_);
  }
  owned.clear();  // joins the workers, waits for their streams, destroys them
}

}  // namespace weft::engine
