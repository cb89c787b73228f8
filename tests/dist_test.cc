// dist without a launcher: gradient buckets as PlanBuckets defines them; a world of one
// (ConnectWorld outside mpirun) whose collectives are the identity on one rank and check their
// arguments; iterators' shards that together give one process's global batches; a trainer with
// a world of one computes what one without a communicator does; the names collectives get in
// messages, and the errors of failing collectives; the progress thread taking back a collective
// that a waiter drove and left.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <tuple>

#include "distributed/internal/collective_name.h"
#include "distributed/internal/mpi_progress.h"
#include "distributed/internal/open_mpi_defaults.h"
#include "distributed/world.h"
#include "tests/weft_test_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

using testing::ExpectErrorContains;
using Buckets = std::vector<std::vector<size_t>>;

TEST(PlanBuckets, PacksSmallConsecutiveArraysAndLeavesLargeOnesAlone) {
  EXPECT_EQ(dist::PlanBuckets({10, 20, 100, 30, 40, 50, 5}, 60),
            (Buckets{{0, 1}, {2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(dist::PlanBuckets({10, 20, 30}, 0), (Buckets{{0}, {1}, {2}}));
  EXPECT_EQ(dist::PlanBuckets({10, 20, 30}, 1000), (Buckets{{0, 1, 2}}));
  EXPECT_EQ(dist::PlanBuckets({}, 10), Buckets{});
}

// The text a failure names a collective by (tests/dist_failure_test.sh expects the first form).
TEST(CollectiveName, NamesTheCollectiveItsSizeAndItsTransport) {
  using dist::internal::CollectiveName;
  EXPECT_EQ(CollectiveName::AllReduce(dist::ReduceOp::kSum, 4, DType::kFloat32, 1).ToString(),
            "all-reduce (sum of 4 float32 in 1 array)");
  EXPECT_EQ(
      CollectiveName::AllReduce(dist::ReduceOp::kAverage, 300, DType::kFloat64, 3, 0).ToString(),
      "all-reduce (average of 300 float64 in 3 arrays on gpu:0, nccl)");
  EXPECT_EQ(CollectiveName::Broadcast(4096, 1).ToString(), "broadcast (4096 bytes from rank 1)");
  EXPECT_EQ(CollectiveName::Broadcast(8, 0, 2).ToString(),
            "broadcast (8 bytes from rank 0 on gpu:2, nccl)");
  EXPECT_EQ(CollectiveName::AllGather(64).ToString(), "all-gather (64 bytes per rank)");
}

// The eager limit weft sets for Open MPI's shared-memory transport, unless the user set one
// (tests/dist_mpi_test.cc checks that Open MPI takes it).
TEST(OpenMpiDefaults, SetTheEagerLimitOnlyWhereTheUserHasNot) {
#ifndef OPEN_MPI
  GTEST_SKIP() << "built against an MPI other than Open MPI: weft sets nothing";
#endif
  using dist::internal::kEagerLimitVariable;
  unsetenv(kEagerLimitVariable);
  dist::internal::SetOpenMpiDefaults();
  ASSERT_NE(std::getenv(kEagerLimitVariable), nullptr);
  EXPECT_STREQ(std::getenv(kEagerLimitVariable), dist::internal::kEagerLimit);
  setenv(kEagerLimitVariable, "8192", 1);
  dist::internal::SetOpenMpiDefaults();
  EXPECT_STREQ(std::getenv(kEagerLimitVariable), "8192");
  unsetenv(kEagerLimitVariable);
}

// Hands `work` (its sequence and done filled in here) to `progress` from an engine op that
// writes `var`.
void PushWork(dist::internal::MpiProgress& progress, engine::VarHandle var,
              dist::internal::MpiWork work) {
  work.sequence = progress.NextSequence();
  engine::Engine::Get()->PushAsync(
      [&progress, work = std::move(work)](engine::RunContext, engine::OnComplete done) mutable {
        work.done = done;
        progress.Submit(std::move(work));
      },
      Device::Cpu(), {}, {var}, engine::FnProperty::kAsync);
}

// A collective whose start or test fails (an MPI or NCCL call) fails its op with an error that
// names it, and the collectives after it still run.
TEST(MpiProgress, AFailingCollectiveNamesItselfInItsError) {
  dist::internal::MpiProgress progress(dist::CommOptions{}, /*with_mpi=*/false);
  engine::Engine& engine = *engine::Engine::Get();
  const engine::VarHandle a = engine.NewVariable(), b = engine.NewVariable(),
                          c = engine.NewVariable();
  dist::internal::MpiWork bad_start;
  bad_start.what =
      dist::internal::CollectiveName::AllReduce(dist::ReduceOp::kSum, 256, DType::kFloat32, 1);
  bad_start.start = [](MPI_Request*) { throw Error("ncclAllReduce failed: unhandled cuda error"); };
  dist::internal::MpiWork bad_test;
  bad_test.what = dist::internal::CollectiveName::AllGather(64);
  bad_test.start = [](MPI_Request*) {};
  bad_test.test = []() -> bool { throw Error("ncclCommGetAsyncError: remote process exited"); };
  dist::internal::MpiWork good;
  good.what = dist::internal::CollectiveName::Broadcast(4, 0);
  good.start = [](MPI_Request*) {};
  good.test = [] { return true; };
  PushWork(progress, a, std::move(bad_start));
  PushWork(progress, b, std::move(bad_test));
  PushWork(progress, c, std::move(good));
  ExpectErrorContains([&] { engine.WaitForVar(a); },
                      {"dist: collective #0 all-reduce (sum of 256 float32 in 1 array) on rank 0 "
                       "of 1 (local) failed: "
                       "ncclAllReduce failed: unhandled cuda error"});
  ExpectErrorContains(
      [&] { engine.WaitForVar(b); },
      {"dist: collective #1 all-gather (64 bytes per rank) on rank 0 of 1 (local) failed: "
       "ncclCommGetAsyncError: remote process exited"});
  engine.WaitForVar(c);
  EXPECT_EQ(progress.started(), 2u);  // the first start threw
  engine.WaitForAll();                // the failures' errors, reported above, are cleared
}

// A collective handed over while an earlier one never is (its op was skipped) fails when its time
// limit passes, with a message that says so, though nothing else happens meanwhile.
TEST(MpiProgress, ACollectiveThatCannotStartFailsAtItsTimeLimit) {
  dist::internal::MpiProgress progress(dist::CommOptions{0.2, /*abort_on_timeout=*/false},
                                       /*with_mpi=*/false);
  progress.NextSequence();  // #0: pushed, never handed over
  const engine::VarHandle var = engine::Engine::Get()->NewVariable();
  dist::internal::MpiWork late;
  late.what = dist::internal::CollectiveName::Broadcast(4, 0);
  late.start = [](MPI_Request*) {};
  late.test = [] { return true; };
  while (!progress.asleep()) std::this_thread::yield();  // handed over to a thread asleep
  PushWork(progress, var, std::move(late));
  ExpectErrorContains(
      [&] { engine::Engine::Get()->WaitForVar(var); },
      {"dist: collective #1 broadcast (4 bytes from rank 0) on rank 0 of 1 (local) did not "
       "complete "
       "within 0.2 s (not started: an earlier collective of this rank never became ready)"});
  EXPECT_EQ(progress.started(), 0u);
  engine::Engine::Get()->WaitForAll();
}

// A waiter that drives a collective keeps it (the progress thread stays off it) until the waiter
// leaves; then the thread takes it back. The collective's test passes only off this thread, and
// only once this thread has tested it (driven it, through Help); the wait then ends only if this
// thread left (its spin ran out) and the progress thread went on with it. A progress thread that
// kept yielding to a waiter gone would end in the time limit's error here.
TEST(MpiProgress, TheThreadTakesBackACollectiveThatItsWaiterLeaves) {
  dist::internal::MpiProgress progress(dist::CommOptions{20, /*abort_on_timeout=*/false},
                                       /*with_mpi=*/false);
  engine::Engine& engine = *engine::Engine::Get();
  const engine::VarHandle var = engine.NewVariable();
  const std::thread::id waiter = std::this_thread::get_id();
  std::atomic<int> waiter_tests{0};
  const uint64_t sequence = progress.NextSequence();
  engine.PushAsync(
      [&](engine::RunContext, engine::OnComplete done) {
        dist::internal::MpiWork work;
        work.sequence = sequence;
        work.what = dist::internal::CollectiveName::Broadcast(4, 0);
        work.start = [](MPI_Request*) {};
        work.test = [&] {
          if (std::this_thread::get_id() != waiter) return waiter_tests.load() > 0;
          waiter_tests.fetch_add(1);
          return false;
        };
        work.done = done;
        progress.Submit(std::move(work));
      },
      Device::Cpu(), {}, {var}, engine::FnProperty::kAsync);
  while (waiter_tests.load() == 0)
    progress.Help();       // this thread drives it (once the thread lets it)
  engine.WaitForVar(var);  // and leaves it when its spin runs out
  EXPECT_EQ(progress.started(), 1u);
}

TEST(LocalWorld, IsAWorldOfOneWithoutALauncher) {
  ASSERT_FALSE(dist::LaunchedByMpi()) << "run this test without mpirun";
  auto world = dist::ConnectWorld();
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_EQ(world->Describe(), "rank 0 of 1 (local)");
  NDArray a = NDArray::FromVector<float>({1, 2, 3}, Shape{3});
  world->AllReduce(a, dist::ReduceOp::kAverage);
  world->Broadcast(a, 0);
  NDArray out(Shape{3});
  world->AllGather(a, out);
  EXPECT_EQ(out.ToVector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(a.ToVector<float>(), (std::vector<float>{1, 2, 3}));
}

TEST(LocalWorld, CollectivesCheckTheirArguments) {
  auto world = dist::LocalWorld();
  NDArray a(Shape{3}), b(Shape{3}, Device::Cpu(), DType::kFloat64),
      u(Shape{3}, Device::Cpu(), DType::kUInt8);
  ExpectErrorContains(
      [&] {
        world->AllReduce(std::vector<NDArray>{a, b}, dist::ReduceOp::kSum);
      },
      {"share dtype"});
  ExpectErrorContains([&] { world->AllReduce(u, dist::ReduceOp::kSum); }, {"found uint8"});
  ExpectErrorContains([&] { world->Broadcast(a, 1); }, {"root in [0, 1), found 1"});
  ExpectErrorContains([&] { world->AllGather(a, NDArray(Shape{4})); },
                      {"expected out of 3 elements"});
}

TEST(ArrayIterShards, RanksTogetherSeeEachGlobalBatchOnce) {
  std::vector<float> x(11);
  for (int i = 0; i < 11; ++i) x[i] = static_cast<float>(i);
  const Dataset data{NDArray::FromVector(x, Shape{11, 1}), NDArray()};
  ArrayIter whole(data, {.batch_size = 4, .shuffle = true, .seed = 3});
  ArrayIter r0(data, {.batch_size = 2, .shuffle = true, .seed = 3, .rank = 0, .num_ranks = 2});
  ArrayIter r1(data, {.batch_size = 2, .shuffle = true, .seed = 3, .rank = 1, .num_ranks = 2});
  int batches = 0;
  while (whole.Next()) {
    ASSERT_TRUE(r0.Next() && r1.Next());
    std::vector<float> joined = r0.Current().data.ToVector<float>(),
                       second = r1.Current().data.ToVector<float>();
    joined.insert(joined.end(), second.begin(), second.end());
    EXPECT_EQ(joined, whole.Current().data.ToVector<float>()) << "batch " << batches;
    EXPECT_EQ(r0.Current().pad + r1.Current().pad, whole.Current().pad) << "batch " << batches;
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  EXPECT_FALSE(r0.Next() || r1.Next());
  ExpectErrorContains([&] { ArrayIter(data, {.rank = 2, .num_ranks = 2}); }, {"rank 2 of 2"});
}

Symbol Loss() {
  Symbol x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {Symbol::Variable("data")},
                                            {{"num_hidden", "8"}}, "fc1")});
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "3"}}, "fc2");
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

// The buckets a step all-reduces: every gradient once, last layer first, small ones packed (here
// 12 and 96 bytes, then 32 and 128, with buckets of 64: fc2's bias, a bucket of its own as the
// next does not fit, then its weight, and the same for fc1); none without a communicator.
TEST(TrainerWithCommunicator, GradientBucketsAreTheStepsCollectivesLastLayerFirst) {
  auto world = dist::LocalWorld();
  const std::map<std::string, Shape> shapes = {{"data", Shape{6, 4}}, {"label", Shape{6}}};
  Trainer with(Loss(), shapes, Xavier(), SGD(0.1),
               {.communicator = world.get(), .bucket_bytes = 64});
  std::vector<std::vector<std::string>> names;
  for (const std::vector<NDArray>& bucket : with.gradient_buckets()) {
    std::vector<std::string>& n = names.emplace_back();
    for (const NDArray& g : bucket) {
      for (const std::string& p : with.parameter_names()) {
        if (with.gradient(p).var() == g.var()) n.push_back(p);
      }
    }
  }
  EXPECT_EQ(names, (std::vector<std::vector<std::string>>{
                       {"fc2_bias"}, {"fc2_weight"}, {"fc1_bias"}, {"fc1_weight"}}));
  Trainer alone(Loss(), shapes, Xavier(), SGD(0.1));
  EXPECT_TRUE(alone.gradient_buckets().empty());
}

// Updates outside the bound graph (the communicator's path) compute what the graph's updates do,
// bit for bit, also when both clip by global norm (the same ops, imperative or as nodes), and in
// bfloat16 mixed precision (the updates write the 16-bit copies the next step reads either way),
// and with loss scaling (the same scaler step, its growth and an overflow's skip included).
class TrainerWithCommunicator
    : public ::testing::TestWithParam<std::tuple<double, Precision, bool>> {};
INSTANTIATE_TEST_SUITE_P(ClipPrecisionAndScaling, TrainerWithCommunicator,
                         ::testing::Combine(::testing::Values(0.0, 0.05),
                                            ::testing::Values(Precision::kFloat32,
                                                              Precision::kBFloat16Mixed),
                                            ::testing::Bool()));

TEST_P(TrainerWithCommunicator, AWorldOfOneTrainsAsWithoutOne) {
  auto world = dist::LocalWorld();
  const std::map<std::string, Shape> shapes = {{"data", Shape{6, 4}}, {"label", Shape{6}}};
  const auto [clip, precision, scaling] = GetParam();
  std::optional<LossScaling> scaler;
  if (scaling) scaler = LossScaling{.growth_interval = 3};
  SeedRandom(5);
  Trainer plain(Loss(), shapes, Xavier(), Adam(0.01, 0.9, 0.999, 1e-8, 0, 1.0 / 6),
                {.precision = precision, .loss_scaling = scaler, .clip_global_norm = clip});
  SeedRandom(5);
  Trainer with(Loss(), shapes, Xavier(), Adam(0.01, 0.9, 0.999, 1e-8, 0, 1.0 / 6),
               {.precision = precision,
                .loss_scaling = scaler,
                .clip_global_norm = clip,
                .communicator = world.get(),
                .bucket_bytes = 64});
  EXPECT_EQ(with.copy_names(), plain.copy_names());
  EXPECT_EQ(plain.copy_names().empty(), precision == Precision::kFloat32);
  std::vector<float> x(24), y(6);
  for (int k = 0; k < 10; ++k) {
    for (int i = 0; i < 24; ++i) x[i] = std::cos(0.5f * i + k);
    for (int i = 0; i < 6; ++i) y[i] = static_cast<float>((i + k) % 3);
    if (scaling && k == 4) x[1] = std::numeric_limits<float>::infinity();  // both skip step 5
    const Trainer::ArrayMap batch = {{"data", NDArray::FromVector(x, Shape{6, 4})},
                                     {"label", NDArray::FromVector(y, Shape{6})}};
    plain.Step(batch);
    with.Step(batch);
  }
  for (const std::string& p : plain.parameter_names()) {
    EXPECT_EQ(plain.parameter(p).ToVector<float>(), with.parameter(p).ToVector<float>()) << p;
  }
  const auto bits = [](const NDArray& a) {
    return Invoke("Cast", {a}, {{"dtype", "float32"}})[0].ToVector<float>();
  };
  for (const std::string& c : plain.copy_names())
    EXPECT_EQ(bits(plain.copy(c)), bits(with.copy(c))) << c;
  EXPECT_EQ(with.loss_scale(), plain.loss_scale());
  if (scaling) EXPECT_EQ(plain.loss_scale(), 131072) << "grown after 3, halved at 5, grown at 8";
}

}  // namespace
}  // namespace weft
