#include "engine/internal/device_workers.h"

#include "core/error.h"
#include "engine/internal/opr_block.h"
#include "engine/internal/profiler.h"

namespace weft::engine {

DeviceWorkers::DeviceWorkers(DeviceBackend& backend, Device device, int first_worker_id,
                             const WorkerPool::Runner& run)
    : backend_(backend), device_(device) {
  backend_.CheckDevice(device.id);
  int next_id = first_worker_id;
  try {
    const std::string prefix = device.ToString() + " ";
    compute_ = MakePool(prefix + "compute worker", StreamKind::kCompute, next_id, run);
    copy_to_ = MakePool(prefix + "copy-to worker", StreamKind::kCopyToDevice, next_id, run);
    copy_from_ = MakePool(prefix + "copy-from worker", StreamKind::kCopyFromDevice, next_id, run);
    priority_ = MakePool(prefix + "priority worker", StreamKind::kPrioritized, next_id, run);
  } catch (...) {
    for (GpuStream* s : streams_) backend_.DestroyStream(device_.id, s);
    throw;
  }
}

std::unique_ptr<WorkerPool> DeviceWorkers::MakePool(const std::string& name, StreamKind kind,
                                                    int& next_id, const WorkerPool::Runner& run) {
  const int count = backend_.StreamCount(kind);
  WEFT_CHECK_GE(count, 1) << name << ": a device needs at least one worker of each kind";
  WorkerPool::DeviceSetup setup;
  for (int i = 0; i < count; ++i) {
    streams_.push_back(backend_.CreateStream(device_.id, kind));
    setup.streams.push_back(streams_.back());
  }
  DeviceBackend* backend = &backend_;
  const int id = device_.id;
  setup.bind_thread = [backend, id] { backend->BindThread(id); };
  setup.on_idle = [backend](GpuStream* stream) {
    try {
      backend->StreamIdle(stream);
    } catch (const Error&) {
      // StreamIdle keeps its failures for the stream's next flush, which raises them to an op.
    }
  };
  auto pool = std::make_unique<WorkerPool>(name, count, next_id, run, std::move(setup));
  next_id += count;
  return pool;
}

DeviceWorkers::~DeviceWorkers() {
  Stop();
  for (GpuStream* s : streams_) backend_.DestroyStream(device_.id, s);
}

void DeviceWorkers::Submit(OprBlock* op) {
  switch (op->prop) {
    case FnProperty::kCopyToGpu:
      copy_to_->Submit(op, op->priority);
      return;
    case FnProperty::kCopyFromGpu:
      copy_from_->Submit(op, op->priority);
      return;
    case FnProperty::kGpuPrioritized:
      priority_->Submit(op, op->priority);
      return;
    default:
      compute_->Submit(op, op->priority);
      return;
  }
}

void DeviceWorkers::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (WorkerPool* pool : {compute_.get(), copy_to_.get(), copy_from_.get(), priority_.get()})
    pool->Stop();
  try {
    Synchronize();
  } catch (const Error&) {
    // A device fault was already reported by the op that caused it; the streams go anyway.
  }
}

void DeviceWorkers::Synchronize() {
  for (GpuStream* s : streams_) backend_.Synchronize(s);
}

int DeviceWorkers::num_workers() const { return static_cast<int>(streams_.size()); }

void DeviceWorkers::NameTracks(Profiler& profiler) const {
  for (const WorkerPool* pool :
       {compute_.get(), copy_to_.get(), copy_from_.get(), priority_.get()}) {
    for (int i = 0; i < pool->num_workers(); ++i) {
      profiler.NameTrack(pool->worker_id(i), pool->name() + " " + std::to_string(i));
    }
  }
}

void DeviceWorkers::AppendStreams(std::vector<NamedStream>& streams) const {
  const std::string prefix = device_.ToString() + " ";
  size_t next = 0;  // streams_ is in pool order
  const std::pair<const WorkerPool*, const char*> pools[] = {{compute_.get(), "compute"},
                                                             {copy_to_.get(), "copy h2d"},
                                                             {copy_from_.get(), "copy d2h"},
                                                             {priority_.get(), "priority"}};
  for (const auto& [pool, label] : pools) {
    const bool indexed = pool == compute_.get() || pool->num_workers() > 1;
    for (int i = 0; i < pool->num_workers(); ++i) {
      streams.push_back(
          {streams_[next++], prefix + label + (indexed ? " " + std::to_string(i) : "")});
    }
  }
}

}  // namespace weft::engine
