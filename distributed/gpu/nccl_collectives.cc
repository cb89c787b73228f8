// GPU collectives over NCCL (distributed/internal/gpu_collectives.h). One NCCL communicator, for
// the one GPU this process drives (one process per GPU), made on the first GPU collective from a
// unique id that rank 0 draws and broadcasts over MPI; with it a communication stream of its own.
//
// A collective is an async engine op on that GPU. On the compute worker that runs it (after the
// engine has made the worker's stream wait for the inputs' producers) it records `ready` on the
// worker's stream and hands the collective over (MpiProgress), which starts the collectives in
// push order (the order every rank shares): the communication stream waits for `ready`, NCCL
// queues its kernels there, then `finished` is recorded after them. Whoever polls (the progress
// thread, or a thread waiting for an array) sees `finished` complete and completes the op after
// its device work (OnComplete::AfterDeviceWork): its consumers wait for nothing more. No compute
// worker ever waits for the network. A collective not finished within the time limit aborts the
// communicator (ncclCommAbort).
#include <cuda_runtime.h>

#include <memory>
#include <mutex>

#include "core/gpu/cuda_check.h"
#include "distributed/gpu/nccl_lib.h"
#include "distributed/internal/gpu_collectives.h"
#include "distributed/internal/mpi_progress.h"
#include "engine/gpu/event_pool.h"
#include "engine/gpu/gpu_stream.h"

namespace weft::dist::internal {
namespace {

using gpu::Nccl;

ncclDataType_t NcclType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kBFloat16:
      return ncclBfloat16;
    default:
      WEFT_THROW("dist: no NCCL reduction for " << dtype);
  }
}

// The communicator and its stream; destroyed after every collective on it is done. Made on the
// pushing thread, then used only by the thread that drives the collectives (start, test,
// cancel: MpiProgress's driver_ held), which it reaches through MpiProgress::Submit's mutex;
// `aborted` is read by the destructor after every collective has completed (MpiCommunicator's
// destructor drains first).
struct NcclComm {
  int device = -1;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  bool aborted =
      false;  // by a timeout (the driving thread); the destructor then only frees the stream

  ~NcclComm() {
    gpu::DeviceGuard guard(device);
    if (comm != nullptr && !aborted) Nccl().CommDestroy(comm);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

// The two events of one collective, from the engine's pool (creating and destroying two CUDA
// events per collective cost more than the collective's own launch): `ready` is recorded on
// the worker's stream when the op runs, `finished` on the communication stream after NCCL's
// kernels. Given back to the pool when the collective is done with them.
struct Events {
  gpu::PooledEvent* ready = nullptr;
  gpu::PooledEvent* finished = nullptr;
  Events() = default;
  ~Events() {
    for (gpu::PooledEvent* e : {ready, finished})
      if (e != nullptr) gpu::EventPool::Get().Release(e);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

using NcclCall = std::function<void(ncclComm_t, cudaStream_t)>;

class NcclCollectives final : public GpuCollectives {
 public:
  explicit NcclCollectives(const GpuBootstrap& bootstrap) : bootstrap_(bootstrap) {}

  void AllReduce(std::span<const NDArray> arrays, ReduceOp op) override;
  void Broadcast(const NDArray& array, int root) override;
  void AllGather(const NDArray& in, const NDArray& out) override;

 private:
  std::shared_ptr<NcclComm> CommFor(Device device);
  void Push(const CollectiveName& what, Device device, std::vector<engine::VarHandle> reads,
            std::vector<engine::VarHandle> writes, NcclCall call);

  const GpuBootstrap bootstrap_;
  std::shared_ptr<NcclComm> comm_;  // made by the first collective (on the pushing thread)
};

// Collective over the ranks: every rank's first GPU collective gets here in the same order.
std::shared_ptr<NcclComm> NcclCollectives::CommFor(Device device) {
  if (comm_ != nullptr) {
    WEFT_CHECK(comm_->device == device.id)
        << "dist: NCCL drives one GPU per process: this one's is gpu:" << comm_->device
        << ", found an array on gpu:" << device.id;
    return comm_;
  }
  ncclUniqueId id{};
  if (bootstrap_.rank == 0) WEFT_NCCL_CHECK(Nccl().GetUniqueId(&id));
  bootstrap_.broadcast(&id, sizeof(id));
  auto comm = std::make_shared<NcclComm>();
  comm->device = device.id;
  gpu::DeviceGuard guard(device.id);
  WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&comm->stream, cudaStreamNonBlocking));
  WEFT_NCCL_CHECK(Nccl().CommInitRank(&comm->comm, bootstrap_.size, id, bootstrap_.rank));
  comm_ = comm;
  return comm_;
}

// Whether the collective's kernels are done (`finished`, recorded after them, completed); throws
// NCCL's asynchronous error (a peer gone) while they are not.
bool NcclFinished(const NcclComm& comm, const Events& events) {
  const cudaError_t state = cudaEventQuery(events.finished->event);
  if (state == cudaErrorNotReady) {
    ncclResult_t async = ncclSuccess;
    WEFT_NCCL_CHECK(Nccl().CommGetAsyncError(comm.comm, &async));
    WEFT_NCCL_CHECK(async);
    return false;
  }
  WEFT_CUDA_CHECK(state);
  return true;
}

// The collective as MpiProgress runs it, made on the op's worker (`ctx`), which records `ready`
// on its stream now: start makes the communication stream wait for `ready`, queues `call` there
// and records `finished`; test polls `finished`; cancel (a timeout) aborts the communicator. When
// `ready` cannot be recorded, the work is still handed over, so that the later collectives start:
// it fails in its turn.
MpiWork MakeNcclWork(uint64_t sequence, const CollectiveName& what, std::shared_ptr<NcclComm> comm,
                     NcclCall call, const engine::RunContext& ctx, engine::OnComplete done) {
  MpiWork work{sequence, what, nullptr, nullptr, std::move(done)};
  work.device_work = true;  // test saw `finished`: the worker's stream holds only `ready`, done too
  try {
    auto events = std::make_shared<Events>();
    events->ready = gpu::EventPool::Get().Record(*ctx.stream);
    work.start = [comm, events, call = std::move(call)](MPI_Request*) {
      gpu::DeviceGuard guard(comm->device);
      WEFT_CUDA_CHECK(cudaStreamWaitEvent(comm->stream, events->ready->event, 0));
      call(comm->comm, comm->stream);
      events->finished = gpu::EventPool::Get().RecordOn(comm->device, comm->stream);
    };
    work.test = [comm, events] { return NcclFinished(*comm, *events); };
    work.cancel = [comm] {
      Nccl().CommAbort(comm->comm);
      comm->aborted = true;
    };
  } catch (...) {
    work.start = [error = std::current_exception()](MPI_Request*) {
      std::rethrow_exception(error);
    };
  }
  return work;
}

void NcclCollectives::Push(const CollectiveName& what, Device device,
                           std::vector<engine::VarHandle> reads,
                           std::vector<engine::VarHandle> writes, NcclCall call) {
  std::shared_ptr<NcclComm> comm = CommFor(device);
  MpiProgress* progress = bootstrap_.progress;
  const uint64_t sequence = progress->NextSequence();
  auto fn = [=, call = std::move(call)](engine::RunContext ctx, engine::OnComplete done) {
    progress->Submit(MakeNcclWork(sequence, what, comm, call, ctx, std::move(done)));
  };
  engine::Engine::Get()->PushAsync(std::move(fn), device, reads, writes,
                                   engine::FnProperty::kNormal,
                                   /*priority=*/1, "dist_nccl");
}

std::vector<engine::VarHandle> VarsOf(std::span<const NDArray> arrays) {
  std::vector<engine::VarHandle> vars;
  for (const NDArray& a : arrays) vars.push_back(a.var());
  return vars;
}

// A bucket of several arrays is one NCCL group: one launch for all of them.
void NcclCollectives::AllReduce(std::span<const NDArray> arrays, ReduceOp op) {
  const std::vector<NDArray> held(arrays.begin(), arrays.end());
  const ncclDataType_t type = NcclType(arrays[0].dtype());
  const ncclRedOp_t reduce = op == ReduceOp::kAverage ? ncclAvg : ncclSum;
  size_t elements = 0;
  for (const NDArray& a : arrays) elements += static_cast<size_t>(a.size());
  const CollectiveName what = CollectiveName::AllReduce(op, elements, arrays[0].dtype(),
                                                        arrays.size(), arrays[0].device().id);
  Push(what, arrays[0].device(), {}, VarsOf(arrays),
       [held, type, reduce](ncclComm_t comm, cudaStream_t s) {
         const auto one = [&](const NDArray& a) {
           void* p = a.View().raw();
           WEFT_NCCL_CHECK(
               Nccl().AllReduce(p, p, static_cast<size_t>(a.size()), type, reduce, comm, s));
         };
         if (held.size() == 1) return one(held[0]);  // a group of one costs two calls more
         WEFT_NCCL_CHECK(Nccl().GroupStart());
         for (const NDArray& a : held) one(a);
         WEFT_NCCL_CHECK(Nccl().GroupEnd());
       });
}

void NcclCollectives::Broadcast(const NDArray& array, int root) {
  Push(CollectiveName::Broadcast(array.bytes(), root, array.device().id), array.device(), {},
       {array.var()}, [array, root](ncclComm_t comm, cudaStream_t s) {
         void* p = array.View().raw();
         WEFT_NCCL_CHECK(Nccl().Broadcast(p, p, array.bytes(), ncclUint8, root, comm, s));
       });
}

void NcclCollectives::AllGather(const NDArray& in, const NDArray& out) {
  Push(CollectiveName::AllGather(in.bytes(), in.device().id), in.device(), {in.var()}, {out.var()},
       [in, out](ncclComm_t comm, cudaStream_t s) {
         WEFT_NCCL_CHECK(
             Nccl().AllGather(in.View().raw(), out.View().raw(), in.bytes(), ncclUint8, comm, s));
       });
}

}  // namespace

std::unique_ptr<GpuCollectives> MakeGpuCollectives(const GpuBootstrap& bootstrap) {
  return std::make_unique<NcclCollectives>(bootstrap);
}

}  // namespace weft::dist::internal
