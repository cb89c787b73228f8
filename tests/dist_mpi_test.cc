// The MPI collectives against their definitions, on every rank of `mpirun -np 2`
// (tests/mpirun_test.sh launches this binary; alone, it is a world of one and the multi-rank tests
// skip): sums, means, buckets of several arrays, broadcasts from each root and all-gathers give,
// bit for bit, what the definitions say with each rank's values; collectives start in push order on
// every rank even when the engine finds a later one ready first; Open MPI runs with the transport
// settings weft gives it (the all-reduce algorithm, the eager limit); and a 2-rank trainer keeps
// every rank's parameters bitwise identical after each of 50 steps and matches one process on the
// global batch; and a gradient's all-reduce starts while the rest of backward is still held.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "distributed/internal/mpi_progress.h"
#include "distributed/internal/open_mpi_defaults.h"
#include "distributed/world.h"
#include "engine/engine.h"
#include "tests/backward_hook_op.h"
#include "weft/weft.h"

namespace weft {
namespace {

dist::Communicator* g_world = nullptr;  // set by main for the whole run

// Rank r's value at index i: small integers, so that sums in float32 are exact in any order.
float ValueOf(int rank, int64_t i) { return static_cast<float>((rank + 1) * 3 + (i % 17) - 8); }

NDArray RankArray(int64_t n, DType dtype = DType::kFloat32) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = ValueOf(g_world->rank(), i);
  NDArray a(Shape{n}, Device::Cpu(), DType::kFloat64);
  a.CopyFrom(v);
  if (dtype == DType::kFloat64) return a;
  return Invoke("Cast", {a}, {{"dtype", "float32"}})[0];
}

double SumOverRanks(int64_t i) {
  double s = 0;
  for (int r = 0; r < g_world->size(); ++r) s += ValueOf(r, i);
  return s;
}

class DistMpi : public testing::Test {
 protected:
  void SetUp() override {
    if (g_world->size() < 2)
      GTEST_SKIP() << "a world of one: run under mpirun -np 2 (tests/mpirun_test.sh)";
  }
};

TEST_F(DistMpi, AllReduceSumIsTheSumOfEveryRanksArray) {
  for (int64_t n : {1, 1000, 300000}) {
    NDArray a = RankArray(n);
    g_world->AllReduce(a, dist::ReduceOp::kSum);
    const std::vector<float> got = a.ToVector<float>();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], static_cast<float>(SumOverRanks(i))) << "n " << n << " i " << i;
  }
}

TEST_F(DistMpi, AllReduceAverageOfFloat64IsTheSumTimesOneOverSize) {
  NDArray a = RankArray(4097, DType::kFloat64);
  g_world->AllReduce(a, dist::ReduceOp::kAverage);
  const std::vector<double> got = a.ToVector<double>();
  for (int64_t i = 0; i < 4097; ++i)
    ASSERT_EQ(got[i], SumOverRanks(i) * (1.0 / g_world->size())) << i;
}

TEST_F(DistMpi, ABucketReducesEachOfItsArrays) {
  std::vector<NDArray> bucket = {RankArray(3), RankArray(1024), RankArray(7)};
  g_world->AllReduce(bucket, dist::ReduceOp::kSum);
  for (const NDArray& a : bucket) {
    const std::vector<float> got = a.ToVector<float>();
    for (int64_t i = 0; i < a.size(); ++i)
      ASSERT_EQ(got[i], static_cast<float>(SumOverRanks(i))) << a.size();
  }
}

TEST_F(DistMpi, BroadcastGivesTheRootsArrayFromEveryRoot) {
  for (int root = 0; root < g_world->size(); ++root) {
    NDArray a = RankArray(513);
    g_world->Broadcast(a, root);
    const std::vector<float> got = a.ToVector<float>();
    for (int64_t i = 0; i < 513; ++i) ASSERT_EQ(got[i], ValueOf(root, i)) << "root " << root;
  }
}

TEST_F(DistMpi, AllGatherConcatenatesTheRanksArraysInRankOrder) {
  NDArray in = RankArray(100);
  NDArray out(Shape{g_world->size(), 100});
  g_world->AllGather(in, out);
  const std::vector<float> got = out.ToVector<float>();
  for (int r = 0; r < g_world->size(); ++r) {
    for (int64_t i = 0; i < 100; ++i) ASSERT_EQ(got[r * 100 + i], ValueOf(r, i)) << "rank " << r;
  }
}

// Rank 0 holds the first collective's input back (an async op it completes itself) until the
// second, ready at once, is waiting at the progress thread; rank 1 lets both run. Started out of
// order, rank 0's second would meet rank 1's first: the sums would mix the two arrays.
TEST_F(DistMpi, CollectivesStartInPushOrderWhateverTheEngineFindsReadyFirst) {
  NDArray first = RankArray(64), second = RankArray(64);
  engine::Engine& engine = *engine::Engine::Get();
  std::promise<engine::OnComplete*> held;
  std::unique_ptr<engine::OnComplete> gate;
  const bool hold = g_world->rank() == 0;
  if (hold) {
    engine.PushAsync(
        [&](engine::RunContext, engine::OnComplete done) {
          gate = std::make_unique<engine::OnComplete>(done);
          held.set_value(gate.get());
        },
        Device::Cpu(), {}, {first.var()}, engine::FnProperty::kNormal, 0, "gate");
  }
  Invoke("mul_scalar", {first}, {{"scalar", "10"}}, {.outputs = {first}});  // first becomes 10x
  g_world->AllReduce(first, dist::ReduceOp::kSum);
  g_world->AllReduce(second, dist::ReduceOp::kSum);
  if (hold) {
    engine::OnComplete* open = held.get_future().get();
    const auto* progress = dist::internal::MpiProgress::Instance();
    while (progress->waiting() == 0) std::this_thread::yield();  // the second is handed over
    (*open)();
  }
  const std::vector<float> a = first.ToVector<float>(), b = second.ToVector<float>();
  for (int64_t i = 0; i < 64; ++i) {
    ASSERT_EQ(a[i], static_cast<float>(10 * SumOverRanks(i))) << i;
    ASSERT_EQ(b[i], static_cast<float>(SumOverRanks(i))) << i;
  }
}

// Open MPI's libnbc would reduce an in-place all-reduce of any size over its binomial tree (2.4x
// MPI_Allreduce's time from 1 MB here): from NbcAlgorithm::kRingFrom bytes the progress thread asks
// for the ring through MPI_T, below it for recursive doubling; the sums stay right either way.
TEST_F(DistMpi, LargeAllReducesAskOpenMpiForTheRingAndSmallOnesForRecursiveDoubling) {
  using dist::internal::NbcAlgorithm;
  auto* progress = dist::internal::MpiProgress::Instance();
  const auto algorithm = [&] {
    int value = -2;
    progress->RunOnThread([&] { value = progress->nbc().Current(); });
    return value;
  };
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr ||
      std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm")) {
    GTEST_SKIP() << "not Open MPI's mpirun, or its iallreduce algorithm set by the user";
  }
  ASSERT_TRUE(progress->nbc().Available())
      << "Open MPI's coll_libnbc_iallreduce_algorithm not found through MPI_T";
  for (int64_t n : {int64_t{NbcAlgorithm::kRingFrom / sizeof(float)}, int64_t{256}}) {
    NDArray a = RankArray(n);
    g_world->AllReduce(a, dist::ReduceOp::kSum);
    const std::vector<float> got = a.ToVector<float>();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], static_cast<float>(SumOverRanks(i))) << n << " at " << i;
    EXPECT_EQ(algorithm(), n * 4 >= int64_t{NbcAlgorithm::kRingFrom}
                               ? NbcAlgorithm::kRing
                               : NbcAlgorithm::kRecursiveDoubling)
        << n;
  }
}

// Open MPI took the eager limit of its shared-memory transport from the environment, where weft
// sets it unless the user did (distributed/internal/open_mpi_defaults.h; dist_test checks that
// rule).
TEST_F(DistMpi, OpenMpiUsesTheEagerLimitOfTheEnvironment) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) GTEST_SKIP() << "not Open MPI's mpirun";
  const char* set = std::getenv(dist::internal::kEagerLimitVariable);
  ASSERT_NE(set, nullptr) << "weft sets it before MPI_Init";
  unsigned long long value =
      0;  // the variable is a size_t or an int: either fits, the rest stays 0
  bool found = false;
  auto* progress = dist::internal::MpiProgress::Instance();
  progress->RunOnThread([&] {
    int provided = 0, index = -1, count = 0;
    ASSERT_EQ(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided), MPI_SUCCESS);
    found = MPI_T_cvar_get_index("btl_vader_eager_limit", &index) == MPI_SUCCESS;
    if (found) {
      MPI_T_cvar_handle handle;
      ASSERT_EQ(MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count), MPI_SUCCESS);
      ASSERT_EQ(count, 1);
      EXPECT_EQ(MPI_T_cvar_read(handle, &value), MPI_SUCCESS);
      MPI_T_cvar_handle_free(&handle);
    }
    MPI_T_finalize();
  });
  if (!found) GTEST_SKIP() << "Open MPI's shared-memory transport (btl/vader) is not loaded";
  EXPECT_EQ(value, std::strtoull(set, nullptr, 10));
}

// ---- the trainer on 2 ranks --------------------------------------------------------------------

constexpr int64_t kGlobalBatch = 32, kFeatures = 10, kClasses = 5, kSteps = 50;

Symbol MlpLoss() {
  Symbol x = Symbol::Variable("data");
  x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {x}, {{"num_hidden", "32"}}, "fc1")});
  x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {x}, {{"num_hidden", "16"}}, "fc2")});
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(kClasses)}}, "fc3");
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

// Step k's global batch, rows [begin, end): data and labels that depend on (k, row) only.
std::map<std::string, NDArray> GlobalBatchRows(int k, int64_t begin, int64_t end) {
  std::vector<float> x, y;
  for (int64_t row = begin; row < end; ++row) {
    for (int64_t j = 0; j < kFeatures; ++j)
      x.push_back(std::sin(0.31f * (row * kFeatures + j) + 0.7f * k));
    y.push_back(static_cast<float>((row * 7 + k) % kClasses));
  }
  const int64_t n = end - begin;
  return {{"data", NDArray::FromVector(x, Shape{n, kFeatures})},
          {"label", NDArray::FromVector(y, Shape{n})}};
}

// Every parameter, concatenated in name order, as this rank holds it.
std::vector<float> Flat(const Trainer& t) {
  std::vector<float> all;
  for (const std::string& p : t.parameter_names()) {
    const std::vector<float> v = t.parameter(p).ToVector<float>();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// rank's copy of `mine` next to every other rank's, through the communicator's all-gather.
std::vector<float> Gathered(const std::vector<float>& mine) {
  NDArray in = NDArray::FromVector(mine, Shape{static_cast<int64_t>(mine.size())});
  NDArray out(Shape{g_world->size() * in.size()});
  g_world->AllGather(in, out);
  return out.ToVector<float>();
}

// Every rank's parameters equal this rank's, bit for bit, after step `step`.
void ExpectRanksAgree(const Trainer& t, int step) {
  const std::vector<float> mine = Flat(t), all = Gathered(mine);
  for (int r = 0; r < g_world->size(); ++r) {
    EXPECT_EQ(0,
              std::memcmp(all.data() + r * mine.size(), mine.data(), mine.size() * sizeof(float)))
        << "step " << step << ": rank " << r << "'s parameters differ from rank " << g_world->rank()
        << "'s";
  }
}

// 50 steps on 2 ranks (each on its half of the global batch) against one process on the whole
// batch, both clipping by global norm `clip` (0: none); returns the largest parameter difference.
double TrainOnTwoRanksAndAlone(double clip, std::vector<float>* alone_params) {
  const int rank = g_world->rank(), size = g_world->size();
  const int64_t local = kGlobalBatch / size;
  SeedRandom(100 + rank);  // different initial values on each rank: the broadcast must unify them
  TrainerOptions dist_options{.clip_global_norm = clip,
                              .communicator = g_world,
                              .bucket_bytes = 600};  // several buckets, one alone
  Trainer dist(MlpLoss(), {{"data", Shape{local, kFeatures}}, {"label", Shape{local}}}, Xavier(),
               SGD(0.2, 0.9, 1e-4, 1.0 / local), dist_options);
  Trainer single(MlpLoss(),
                 {{"data", Shape{kGlobalBatch, kFeatures}}, {"label", Shape{kGlobalBatch}}},
                 Xavier(), SGD(0.2, 0.9, 1e-4, 1.0 / kGlobalBatch), {.clip_global_norm = clip});
  for (const std::string& p : single.parameter_names())
    dist.parameter(p).CopyTo(single.parameter(p));
  for (int k = 0; k < kSteps; ++k) {
    dist.Step(GlobalBatchRows(k, rank * local, (rank + 1) * local));
    single.Step(GlobalBatchRows(k, 0, kGlobalBatch));
    ExpectRanksAgree(dist, k + 1);
  }
  const std::vector<float> got = Flat(dist), want = Flat(single);
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(double{got[i]} - want[i]));
  EXPECT_GT(std::fabs(double{got[0]} - 0), 0);  // trained, not zeros
  *alone_params = want;
  return max_diff;
}

// Averaging two half-batch gradients rounds differently from one global-batch gradient: the two
// runs agree to float32 rounding, accumulated over 50 steps.
TEST_F(DistMpi, TwoRanksStayBitwiseIdenticalAndMatchOneProcessOnTheGlobalBatch) {
  std::vector<float> alone;
  EXPECT_LT(TrainOnTwoRanksAndAlone(0, &alone), 1e-4)
      << "largest difference from one process on the global batch";
}

// Clipping reads the averaged gradients: every rank clips by the same scale, the one a single
// process on the global batch computes (a clip this small clips every step: the runs differ from
// the unclipped ones).
TEST_F(DistMpi, TwoRanksClippingByGlobalNormMatchOneProcessClippingTheGlobalBatch) {
  std::vector<float> clipped, unclipped;
  EXPECT_LT(TrainOnTwoRanksAndAlone(0.05, &clipped), 1e-4)
      << "largest difference from one process on the global batch";
  TrainOnTwoRanksAndAlone(0, &unclipped);
  double change = 0;
  for (size_t i = 0; i < clipped.size(); ++i)
    change = std::max(change, std::fabs(double{clipped[i]} - unclipped[i]));
  EXPECT_GT(change, 1e-3) << "clipping at 0.05 changed nothing: the test does not clip";
}

// bfloat16-mixed with loss scaling on two ranks: an overflow in rank 1's half of a batch reaches
// every rank through the all-reduce (the gradients are all-reduced scaled, unscaled by the
// updates), so every rank skips that step, halves its scale and stays bitwise identical.
TEST_F(DistMpi, AnOverflowOnOneRankSkipsTheStepOnEveryRank) {
  const int rank = g_world->rank(), size = g_world->size();
  const int64_t local = kGlobalBatch / size;
  TrainerOptions options{.precision = Precision::kBFloat16Mixed,
                         .loss_scaling = LossScaling{.growth_interval = 4},
                         .communicator = g_world};
  Trainer t(MlpLoss(), {{"data", Shape{local, kFeatures}}, {"label", Shape{local}}}, Xavier(),
            SGD(0.2, 0.9, 1e-4, 1.0 / local), options);
  std::vector<double> scales;
  for (int k = 0; k < 8; ++k) {
    std::map<std::string, NDArray> batch = GlobalBatchRows(k, rank * local, (rank + 1) * local);
    const bool overflow = k == 5;
    if (overflow && rank == 1) {
      std::vector<float> x = batch.at("data").ToVector<float>();
      x[0] = std::numeric_limits<float>::infinity();
      batch["data"] = NDArray::FromVector(x, Shape{local, kFeatures});
    }
    const std::vector<float> before = Flat(t);
    t.Step(batch);
    if (overflow) EXPECT_EQ(Flat(t), before) << "rank " << rank << " wrote the step";
    ExpectRanksAgree(t, k + 1);
    scales.push_back(t.loss_scale());
  }
  // grown after step 4, halved at the overflow (step 6), the count restarted
  EXPECT_EQ(scales,
            (std::vector<double>{65536, 65536, 65536, 131072, 131072, 65536, 65536, 65536}));
  EXPECT_EQ(Gathered({static_cast<float>(t.loss_scale())}),
            std::vector<float>(size, static_cast<float>(t.loss_scale())));
}

// ---- BatchNorm's running statistics: each rank its own -----------------------------------------

// fc1 - BatchNorm with relu - fc2, on 2 ranks: the parameters stay identical (their gradients are
// averaged), while each rank's running statistics follow its own half of every batch, as PyTorch's
// DDP without SyncBatchNorm; nothing all-reduces them.
TEST_F(DistMpi, EachRankKeepsTheRunningStatisticsOfItsOwnBatches) {
  const int rank = g_world->rank(), size = g_world->size();
  const int64_t local = kGlobalBatch / size;
  Symbol x = Symbol::Op("FullyConnected", {Symbol::Variable("data")}, {{"num_hidden", "8"}}, "fc1");
  x = Symbol::Op("BatchNorm", {x}, {{"act_type", "relu"}}, "bn1");
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(kClasses)}}, "fc2");
  const Symbol loss = Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
  SeedRandom(100 + rank);
  Trainer trainer(loss, {{"data", Shape{local, kFeatures}}, {"label", Shape{local}}}, Xavier(),
                  SGD(0.2, 0.9, 0, 1.0 / local), {.communicator = g_world});
  for (int k = 0; k < 5; ++k) trainer.Step(GlobalBatchRows(k, rank * local, (rank + 1) * local));
  const std::vector<float> params = Flat(trainer), all_params = Gathered(params);
  const std::vector<float> mean = trainer.auxiliary("bn1_moving_mean").ToVector<float>();
  const std::vector<float> all_means = Gathered(mean);
  for (int r = 0; r < size; ++r) {
    EXPECT_EQ(std::vector<float>(all_params.begin() + r * params.size(),
                                 all_params.begin() + (r + 1) * params.size()),
              params)
        << "rank " << r << "'s parameters";
    if (r == rank) continue;
    EXPECT_NE(std::vector<float>(all_means.begin() + r * mean.size(),
                                 all_means.begin() + (r + 1) * mean.size()),
              mean)
        << "rank " << r << " has rank " << rank << "'s running mean: were they all-reduced?";
  }
}

// ---- overlap: a gradient's all-reduce starts while the rest of backward runs -------------------

// Opened by the test; the gate's backward waits for it (at most a minute, so a failing test ends).
std::promise<void> g_gate_open;
std::shared_future<void> g_gate = g_gate_open.get_future().share();

// An identity whose backward waits, on its engine worker, until the test opens the gate.
[[maybe_unused]] const bool gate_registered =
    RegisterBackwardHookOp("_test_gate", [] { g_gate.wait_for(std::chrono::seconds(60)); });

// fc1's backward comes after the gate's, which waits: the gradients of fc3 and fc2 (two arrays
// each, one bucket each) are written while backward is held, and each one's all-reduce must start
// then, on every rank, not after the whole backward; fc1's two cannot start before the gate opens.
TEST_F(DistMpi, EachGradientsAllReduceStartsWhileTheRestOfBackwardRuns) {
  Symbol x = Symbol::Op("_test_gate", {Symbol::Op("FullyConnected", {Symbol::Variable("data")},
                                                  {{"num_hidden", "8"}}, "fc1")});
  x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {Symbol::Op("relu", {x})},
                                     {{"num_hidden", "8"}}, "fc2")});
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", std::to_string(kClasses)}}, "fc3");
  Trainer trainer(Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}),
                  {{"data", Shape{4, kFeatures}}, {"label", Shape{4}}}, Xavier(), SGD(0.1),
                  {.communicator = g_world, .bucket_bytes = 0});
  for (const std::string& p : trainer.parameter_names())
    trainer.parameter(p).WaitToRead();  // the broadcasts
  const auto* progress = dist::internal::MpiProgress::Instance();
  const uint64_t before = progress->started();
  trainer.data("data").Fill(0.5);
  trainer.data("label").Fill(1);
  trainer.Step();
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (progress->started() < before + 4 && std::chrono::steady_clock::now() < limit)
    std::this_thread::yield();
  const uint64_t started_while_held = progress->started() - before;
  g_gate_open.set_value();
  for (const std::string& p : trainer.parameter_names()) trainer.parameter(p).WaitToRead();
  EXPECT_EQ(started_while_held, 4u)
      << "all-reduces started while fc1's backward was held (fc3's and fc2's "
         "weight and bias: 4; fewer: they waited for more of backward)";
  EXPECT_EQ(progress->started() - before, 6u);
}

}  // namespace
}  // namespace weft

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<weft::dist::Communicator> world = weft::dist::ConnectWorld();
  weft::g_world = world.get();
  std::printf("dist_mpi_test: %s\n", world->Describe().c_str());
  const int status = RUN_ALL_TESTS();
  weft::engine::Engine::Get()->WaitForAll();
  world.reset();
  return status;
}
