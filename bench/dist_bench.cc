// Data-parallel costs, on 2 MPI ranks of one host:
//   all-reduce   weft's engine op (Communicator::AllReduce, pushed, then WaitToRead) against
//                MPI_Allreduce on the same buffer, called by the same progress thread, for
//                1 KB to 64 MB of float32, each side making `calls` calls in a row after one
//                barrier (its steady cost per call); ratio = weft / MPI (goal: 1.1 or less);
//   peer         the same all-reduces through PyTorch's torch.distributed (gloo, what its
//                DistributedDataParallel uses on CPUs) between 2 processes of this host
//                (bench/torch_dist_peer.py, started by rank 0 after the table while rank 1
//                sleeps): ratio = gloo / weft (--peer=0: no peer);
//   nccl         (--gpu=1, a --config=cuda build, no mpirun) bench/dist_gpu_rows.h
//   overlap      the share of a 2-rank MLP step's all-reduce time hidden behind its backward:
//                (compute + all-reduce - step) / all-reduce, where compute is the step with a
//                world of one (the same pushes without communication), all-reduce the step's
//                buckets alone (Trainer::gradient_buckets), step the 2-rank step.
// Each figure is the median of --reps rounds, the two sides alternating within a round, with a
// barrier before each timed call. Rank 0 prints.
//
//   bazel build --config=opt //bench:dist_bench
//   mpirun -np 2 --allow-run-as-root --bind-to core bazel-bin/bench/dist_bench --reps=20
// Bind each rank to its cores (--bind-to core: one core each on this 2-core machine). Unbound, a
// rank's threads and the other rank's share cores in a placement that changes between processes:
// here 1 KB took 12 to 14 us in most processes and 40 to 130 us in about one in four, which bound
// processes never showed.
//   (--max_kb=N: sizes up to N KB; --overlap=0: no overlap row; --peer=0: no PyTorch)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "bench/dist_gpu_rows.h"
#include "bench/peer.h"
#include "distributed/internal/mpi_check.h"
#include "distributed/internal/mpi_progress.h"
#include "distributed/world.h"
#include "weft/weft.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace weft;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

dist::internal::MpiProgress& Progress() { return *dist::internal::MpiProgress::Instance(); }

void Barrier() {
  Progress().RunOnThread([] { WEFT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); });
}

// Seconds `fn` takes, after a barrier.
double Time(const std::function<void()>& fn) {
  Barrier();
  const auto start = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Calls of one size in a row after a barrier: enough that a round takes a few milliseconds
// (at least one), so the figure is the steady cost of one call, not the barrier's skew between
// the ranks' threads.
int CallsPerRound(size_t bytes) {
  return static_cast<int>(std::clamp<size_t>((size_t{8} << 20) / bytes, 1, 200));
}

// MPI's own calls on the progress thread, `calls` in a row, the calls alone timed: the blocking
// MPI_Allreduce, or the non-blocking MPI_Iallreduce tested to completion (what weft's op starts
// and polls). Seconds per call.
double RawAllReduce(float* data, int n, int calls, bool nonblocking) {
  double seconds = 0;
  Progress().RunOnThread([&] {
    WEFT_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    const auto start = Clock::now();
    for (int c = 0; c < calls; ++c) {
      if (nonblocking) {
        MPI_Request request;
        WEFT_MPI_CHECK(
            MPI_Iallreduce(MPI_IN_PLACE, data, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request));
        for (int done = 0; !done;) WEFT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      } else {
        WEFT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
      }
    }
    seconds = std::chrono::duration<double>(Clock::now() - start).count() / calls;
  });
  return seconds;
}

std::string SizeName(size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MB"
                            : std::to_string(bytes >> 10) + " KB";
}

// weft's microseconds per all-reduce, by size in bytes.
using SizeTimes = std::vector<std::pair<size_t, double>>;

SizeTimes AllReduceTable(dist::Communicator& world, int reps, size_t max_bytes) {
  SizeTimes weft_us;
  if (world.rank() == 0) {
    std::printf("%-10s %6s %10s %14s %16s %8s %8s\n", "all-reduce", "calls", "weft us",
                "MPI_Allreduce", "MPI_Iallreduce", "ratio", "ratio_i");
  }
  for (size_t bytes = 1024; bytes <= max_bytes; bytes *= 4) {
    const int64_t n = static_cast<int64_t>(bytes / sizeof(float));
    const int calls = CallsPerRound(bytes);
    NDArray a(Shape{n});
    a.Fill(0);  // sums of zeros stay zeros: no overflow, no denormals, over any number of calls
    a.WaitToRead();
    float* data = static_cast<float*>(a.View().raw());
    std::vector<double> weft_s, mpi_s, mpi_i_s;
    for (int r = 0; r < reps + 1; ++r) {  // round 0 warms up
      const double w = Time([&] {
                         for (int c = 0; c < calls; ++c) {
                           world.AllReduce(a, dist::ReduceOp::kSum);
                           a.WaitToRead();
                         }
                       }) /
                       calls;
      const double m = RawAllReduce(data, static_cast<int>(n), calls, false);
      const double mi = RawAllReduce(data, static_cast<int>(n), calls, true);
      if (r == 0) continue;
      weft_s.push_back(w);
      mpi_s.push_back(m);
      mpi_i_s.push_back(mi);
    }
    const double w = Median(weft_s) * 1e6, m = Median(mpi_s) * 1e6, mi = Median(mpi_i_s) * 1e6;
    weft_us.emplace_back(bytes, w);
    if (world.rank() == 0) {
      std::printf("%-10s %6d %10.1f %14.1f %16.1f %8.2f %8.2f\n", SizeName(bytes).c_str(), calls, w,
                  m, mi, w / m, w / mi);
    }
  }
  return weft_us;
}

// A barrier whose waiting rank sleeps between looks (MPI_Barrier spins, which would take a core
// from the peer's processes).
void SleepingBarrier() {
  Progress().RunOnThread([] {
    MPI_Request request;
    WEFT_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &request));
    for (int done = 0; !done;) {
      WEFT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (!done) usleep(1000);
    }
  });
}

// PyTorch's all-reduce on the same sizes, by rank 0, while rank 1 sleeps.
void PeerTable(dist::Communicator& world, int reps, const SizeTimes& weft_us) {
  if (world.rank() == 0) {
    std::string calls;  // the same calls per round as weft's row, per size
    for (const auto& [bytes, w] : weft_us)
      calls += (calls.empty() ? "" : ",") + std::to_string(CallsPerRound(bytes));
    const nlohmann::json torch =
        bench::RunPeer("bench/torch_dist_peer.py", std::to_string(reps) + " " + calls);
    if (!torch.value("available", false)) {
      std::printf("peer: not run: %s\n", torch.value("error", std::string("?")).c_str());
    } else {
      std::printf(
          "peer: torch.distributed %s (PyTorch %s), 2 processes of this host, every core, run "
          "after weft's "
          "table (not in turns with it)\n",
          torch["backend"].get<std::string>().c_str(), torch["version"].get<std::string>().c_str());
      std::printf("%-10s %10s %10s %12s\n", "all-reduce", "gloo us", "weft us", "gloo / weft");
      for (const auto& [bytes, w] : weft_us) {
        const double g = torch["us"].value(std::to_string(bytes), 0.0);
        std::printf("%-10s %10.1f %10.1f %12.1f\n", SizeName(bytes).c_str(), g, w, g / w);
      }
    }
  }
  SleepingBarrier();
}

Symbol MlpLoss(int hidden) {
  Symbol x = Symbol::Variable("data");
  for (int i = 1; i <= 3; ++i) {
    x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(hidden)}},
                   "fc" + std::to_string(i));
    x = Symbol::Op("relu", {x});
  }
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "10"}}, "out");
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

// Median seconds of each of `steps` over `reps` rounds (after one to warm up), the steps
// alternating within a round; each step is waited for by its own wait.
std::vector<double> StepTimes(
    int reps, const std::vector<std::pair<std::function<void()>, std::function<void()>>>& steps) {
  std::vector<std::vector<double>> s(steps.size());
  for (int r = 0; r < reps + 1; ++r) {
    for (size_t i = 0; i < steps.size(); ++i) {
      const double t = Time([&] {
        steps[i].first();
        steps[i].second();
      });
      if (r > 0) s[i].push_back(t);
    }
  }
  std::vector<double> medians;
  for (auto& v : s) medians.push_back(Median(v));
  return medians;
}

void OverlapTable(dist::Communicator& world, int reps, int hidden, int batch, size_t bucket_bytes) {
  const std::map<std::string, Shape> shapes = {{"data", Shape{batch, 784}},
                                               {"label", Shape{batch}}};
  auto local = dist::LocalWorld();
  Trainer alone(MlpLoss(hidden), shapes, Xavier(), SGD(0.01, 0.9, 0, 1.0 / batch),
                {.communicator = local.get(), .bucket_bytes = bucket_bytes});
  Trainer both(MlpLoss(hidden), shapes, Xavier(), SGD(0.01, 0.9, 0, 1.0 / batch),
               {.communicator = &world, .bucket_bytes = bucket_bytes});
  for (Trainer* t : {&alone, &both}) {
    t->data("data").Fill(0.5);
    t->data("label").Fill(1);
  }
  const auto wait_params = [](Trainer& t) {
    return [&t] {
      for (const std::string& p : t.parameter_names()) t.parameter(p).WaitToRead();
    };
  };
  const std::vector<std::vector<NDArray>>& buckets =
      both.gradient_buckets();  // what the step all-reduces
  const auto all_reduce = [&] {
    for (const std::vector<NDArray>& bucket : buckets)
      world.AllReduce(bucket, dist::ReduceOp::kAverage);
  };
  const auto wait_buckets = [&] {
    for (const std::vector<NDArray>& bucket : buckets) {
      for (const NDArray& g : bucket) g.WaitToRead();
    }
  };
  const std::vector<double> t = StepTimes(reps, {{[&] { alone.Step(); }, wait_params(alone)},
                                                 {[&] { both.Step(); }, wait_params(both)},
                                                 {all_reduce, wait_buckets}});
  const double compute = t[0], step = t[1], comm = t[2];
  const double hidden_share = std::clamp((compute + comm - step) / comm, 0.0, 1.0);
  if (world.rank() == 0) {
    std::printf(
        "overlap: MLP 784-%d-%d-%d-10, batch %d per rank, %zu buckets of <= %zu KB: compute %.2f "
        "ms, "
        "all-reduce %.2f ms, step %.2f ms: %.0f%% of the all-reduce hidden\n",
        hidden, hidden, hidden, batch, buckets.size(), bucket_bytes >> 10, compute * 1e3,
        comm * 1e3, step * 1e3, 100 * hidden_share);
  }
}

int Flag(int argc, char** argv, const char* name, int fallback) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0)
      return std::atoi(argv[i] + prefix.size());
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = weft::dist::ConnectWorld();
  if (Flag(argc, argv, "gpu", 0) != 0) {  // a world of one on gpu:0
    bench::NcclRows(*world, Flag(argc, argv, "reps", 50));
    return 0;
  }
  if (world->size() < 2) {
    std::fprintf(
        stderr,
        "dist_bench: run it on 2 ranks: mpirun -np 2 [--allow-run-as-root --oversubscribe] %s\n",
        argv[0]);
    return 2;
  }
  const int reps = Flag(argc, argv, "reps", 20);
  if (world->rank() == 0)
    std::printf("dist_bench: %d ranks, median of %d rounds\n", world->size(), reps);
  const size_t max_bytes = static_cast<size_t>(Flag(argc, argv, "max_kb", 64 << 10)) << 10;
  const SizeTimes weft_us = AllReduceTable(*world, reps, max_bytes);
  if (Flag(argc, argv, "peer", 1) != 0) PeerTable(*world, reps, weft_us);
  if (Flag(argc, argv, "overlap", 1) == 0) return 0;
  OverlapTable(*world, reps, Flag(argc, argv, "hidden", 1024), Flag(argc, argv, "batch", 64),
               static_cast<size_t>(Flag(argc, argv, "bucket_kb", 1024)) << 10);
  weft::engine::Engine::Get()->WaitForAll();
  return 0;
}
