// The MPI communicator: CPU collectives as engine ops completed by the progress thread
// (internal/mpi_progress.h); GPU collectives handed to the NCCL backend of a CUDA build.
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"
#include "distributed/internal/gpu_collectives.h"
#include "distributed/internal/mpi_check.h"
#include "distributed/internal/mpi_progress.h"
#include "distributed/world.h"

namespace weft::dist {
namespace internal {
namespace {

MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    default:
      WEFT_THROW("dist: no MPI reduction for " << dtype);
  }
}

int MpiCount(size_t count, const char* what) {
  WEFT_CHECK(count <= static_cast<size_t>(std::numeric_limits<int>::max()))
      << what << ": MPI counts are int; found " << count << " elements";
  return static_cast<int>(count);
}

template <typename T>
void Scale(void* data, size_t n, double factor) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] * factor);
}

// The arrays of one all-reduce, and (for more than one) the contiguous buffer they travel in.
// Used by one thread at a time: the engine worker packs, then hands it over (MpiProgress::Submit,
// under its mutex, which orders the packing before everything the progress thread does with it);
// the progress thread starts, tests and unpacks, then completes the op, which releases the arrays.
struct Bucket {
  std::vector<NDArray> arrays;
  std::vector<unsigned char> staging;
  void* data = nullptr;  // the buffer MPI reduces in place
  size_t elements = 0;

  void Pack() {  // on the engine worker, when the arrays are ready
    if (arrays.size() == 1) {
      data = arrays[0].View().raw();
      return;
    }
    size_t offset = 0;
    for (const NDArray& a : arrays) offset += a.bytes();
    staging.resize(offset);
    offset = 0;
    for (const NDArray& a : arrays) {
      std::memcpy(staging.data() + offset, a.View().raw(), a.bytes());
      offset += a.bytes();
    }
    data = staging.data();
  }
  void Unpack(double factor) {  // on the progress thread, after the reduction
    if (factor != 1) {
      if (arrays[0].dtype() == DType::kFloat32) Scale<float>(data, elements, factor);
      if (arrays[0].dtype() == DType::kFloat64) Scale<double>(data, elements, factor);
    }
    if (arrays.size() == 1) return;
    size_t offset = 0;
    for (const NDArray& a : arrays) {
      std::memcpy(a.View().raw(), staging.data() + offset, a.bytes());
      offset += a.bytes();
    }
  }
};

std::vector<engine::VarHandle> VarsOf(std::span<const NDArray> arrays) {
  std::vector<engine::VarHandle> vars;
  for (const NDArray& a : arrays) vars.push_back(a.var());
  return vars;
}

class MpiCommunicator final : public Communicator {
 public:
  // with_mpi false: a world of one without a launcher, whose GPU collectives still go over NCCL.
  MpiCommunicator(const CommOptions& options, bool with_mpi)
      : progress_(options, with_mpi), with_mpi_(with_mpi) {
    gpu_ = MakeGpuCollectives(
        GpuBootstrap{rank(), size(), local_rank(), options, &progress_,
                     [this](void* data, size_t bytes) { BroadcastBytes(data, bytes); }});
  }
  // Every collective done first, then NCCL's communicator, then MPI (the progress thread's end).
  ~MpiCommunicator() override {
    progress_.Drain();
    gpu_.reset();
  }

  int rank() const override { return progress_.rank(); }
  int size() const override { return progress_.size(); }
  int local_rank() const override { return progress_.local_rank(); }
  const char* transport() const override { return with_mpi_ ? "mpi" : "local"; }

  void AllReduce(std::span<const NDArray> arrays, ReduceOp op) override;
  void Broadcast(const NDArray& array, int root) override;
  void AllGather(const NDArray& in, const NDArray& out) override;

 private:
  GpuCollectives& Gpu(const char* what) {
    WEFT_CHECK(gpu_ != nullptr) << what << ": arrays on a GPU need a --config=cuda build (NCCL)";
    return *gpu_;
  }
  // A blocking broadcast from rank 0 on the progress thread (NCCL's unique id).
  void BroadcastBytes(void* data, size_t bytes) {
    if (!with_mpi_) return;
    progress_.RunOnThread([&] {
      WEFT_MPI_CHECK(MPI_Bcast(data, MpiCount(bytes, "Broadcast"), MPI_BYTE, 0, MPI_COMM_WORLD));
    });
  }
  // Pushes an async CPU op that hands `start` and `finish` to the progress thread under the next
  // sequence number; `prepare` runs first, in the op. kHandOver: `prepare` only looks up
  // pointers, so the op is kAsync (it runs on the thread that makes it ready: at push, when its
  // arrays are, with no worker between the push and the progress thread); kPackThenHandOver:
  // `prepare` copies (a bucket's packing), on a CPU worker.
  static constexpr engine::FnProperty kHandOver = engine::FnProperty::kAsync;
  static constexpr engine::FnProperty kPackThenHandOver = engine::FnProperty::kNormal;
  void PushCollective(const CollectiveName& what, std::vector<engine::VarHandle> reads,
                      std::vector<engine::VarHandle> writes, std::function<void()> prepare,
                      std::function<void(MPI_Request*)> start, std::function<void()> finish,
                      engine::FnProperty prop = kHandOver);

  MpiProgress progress_;
  const bool with_mpi_;
  const std::unique_ptr<Communicator> local_ = LocalWorld();  // CPU collectives without MPI
  std::unique_ptr<GpuCollectives> gpu_;                       // null in a CPU-only build
};

void MpiCommunicator::PushCollective(const CollectiveName& what,
                                     std::vector<engine::VarHandle> reads,
                                     std::vector<engine::VarHandle> writes,
                                     std::function<void()> prepare,
                                     std::function<void(MPI_Request*)> start,
                                     std::function<void()> finish, engine::FnProperty prop) {
  const uint64_t sequence = progress_.NextSequence();
  auto fn = [this, sequence, what, prepare = std::move(prepare), start = std::move(start),
             finish = std::move(finish)](engine::RunContext, engine::OnComplete done) mutable {
    MpiWork work{sequence, what, std::move(start), std::move(finish), done};  // runs once
    try {
      prepare();
    } catch (...) {  // still handed over, so that the later collectives start: it fails when its
                     // turn comes
      work.start = [error = std::current_exception()](MPI_Request*) {
        std::rethrow_exception(error);
      };
    }
    progress_.Submit(std::move(work));
  };
  engine::Engine::Get()->PushAsync(std::move(fn), Device::Cpu(), reads, writes, prop,
                                   /*priority=*/1, "dist_collective");
}

void MpiCommunicator::AllReduce(std::span<const NDArray> arrays, ReduceOp op) {
  CheckAllReduce(arrays, op);
  if (arrays[0].device().is_gpu()) return Gpu("AllReduce").AllReduce(arrays, op);
  if (!with_mpi_) return local_->AllReduce(arrays, op);
  auto bucket = std::make_shared<Bucket>();
  bucket->arrays.assign(arrays.begin(), arrays.end());
  for (const NDArray& a : arrays) bucket->elements += static_cast<size_t>(a.size());
  const MPI_Datatype type = MpiType(arrays[0].dtype());
  const int count = MpiCount(bucket->elements, "AllReduce");
  const double factor = op == ReduceOp::kAverage ? 1.0 / size() : 1.0;
  const CollectiveName name =
      CollectiveName::AllReduce(op, bucket->elements, arrays[0].dtype(), arrays.size());
  const size_t bytes = name.PayloadBytes();
  PushCollective(
      name, {}, VarsOf(arrays), [bucket] { bucket->Pack(); },
      [this, bucket, type, count, bytes](MPI_Request* r) {
        progress_.nbc().BeforeAllReduce(bytes);
        WEFT_MPI_CHECK(
            MPI_Iallreduce(MPI_IN_PLACE, bucket->data, count, type, MPI_SUM, MPI_COMM_WORLD, r));
      },
      [bucket, factor] { bucket->Unpack(factor); },
      arrays.size() == 1 ? kHandOver : kPackThenHandOver);
}

void MpiCommunicator::Broadcast(const NDArray& array, int root) {
  CheckBroadcast(array, root);
  if (array.device().is_gpu()) return Gpu("Broadcast").Broadcast(array, root);
  if (!with_mpi_) return local_->Broadcast(array, root);
  const int bytes = MpiCount(array.bytes(), "Broadcast");
  auto data = std::make_shared<void*>(nullptr);
  PushCollective(
      CollectiveName::Broadcast(array.bytes(), root), {}, {array.var()},
      [data, array] { *data = array.View().raw(); },
      [data, bytes, root](MPI_Request* r) {
        WEFT_MPI_CHECK(MPI_Ibcast(*data, bytes, MPI_BYTE, root, MPI_COMM_WORLD, r));
      },
      nullptr);
}

void MpiCommunicator::AllGather(const NDArray& in, const NDArray& out) {
  CheckAllGather(in, out);
  if (in.device().is_gpu()) return Gpu("AllGather").AllGather(in, out);
  if (!with_mpi_) return local_->AllGather(in, out);
  const int bytes = MpiCount(in.bytes(), "AllGather");
  auto data = std::make_shared<std::pair<void*, void*>>();
  PushCollective(
      CollectiveName::AllGather(in.bytes()), {in.var()}, {out.var()},
      [data, in, out] {
        *data = {in.View().raw(), out.View().raw()};
      },
      [data, bytes](MPI_Request* r) {
        WEFT_MPI_CHECK(MPI_Iallgather(data->first, bytes, MPI_BYTE, data->second, bytes, MPI_BYTE,
                                      MPI_COMM_WORLD, r));
      },
      nullptr);
}

}  // namespace
}  // namespace internal

bool LaunchedByMpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

std::unique_ptr<Communicator> ConnectWorld(const CommOptions& options) {
  return std::make_unique<internal::MpiCommunicator>(options, LaunchedByMpi());
}

}  // namespace weft::dist
