// NCCL's collectives on gpu:0 as a world of one (ConnectWorld without a launcher): all-reduce
// (sum and mean, a bucket of several arrays and dtypes), broadcast and all-gather give what they
// are defined to give on one rank; a collective starts only after the producer of its input on a
// compute stream has run, even when the progress thread has already started it (the input's
// producer is held behind a stream gate until then), and its consumer runs after it; a trainer
// on gpu:0 with the world of one trains as one without a communicator.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <thread>
#include <vector>

#include "distributed/internal/mpi_progress.h"
#include "distributed/world.h"
#include "engine/gpu/gpu_stream.h"
#include "tests/gpu_stream_gate.h"
#include "weft/imperative.h"
#include "weft/weft.h"

namespace weft {
namespace {

const Device kGpu = Device::Gpu(0);

dist::Communicator& World() {
  static const std::unique_ptr<dist::Communicator> world =
      dist::ConnectWorld();  // lives to the end
  return *world;
}

NDArray OnGpu(const std::vector<float>& v) {
  return NDArray::FromVector(v, Shape{static_cast<int64_t>(v.size())}).Copy(kGpu);
}

TEST(GpuDist, AWorldOfOneWithoutALauncher) {
  EXPECT_EQ(World().size(), 1);
  EXPECT_EQ(World().Describe(), "rank 0 of 1 (local)");
}

TEST(GpuDist, AllReduceOfOneRankIsItsOwnArray) {
  NDArray a = OnGpu({1, 2, 3}), b = OnGpu({-4, 5});
  NDArray c = NDArray::FromVector<double>({0.25, 8}, Shape{2}).Copy(kGpu);
  World().AllReduce(a, dist::ReduceOp::kSum);
  World().AllReduce(std::vector<NDArray>{a, b}, dist::ReduceOp::kAverage);
  World().AllReduce(c, dist::ReduceOp::kAverage);
  EXPECT_EQ(a.ToVector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(b.ToVector<float>(), (std::vector<float>{-4, 5}));
  EXPECT_EQ(c.ToVector<double>(), (std::vector<double>{0.25, 8}));
}

TEST(GpuDist, BroadcastAndAllGatherOfOneRank) {
  NDArray a = OnGpu({6, 7});
  World().Broadcast(a, 0);
  NDArray out(Shape{2}, kGpu);
  World().AllGather(a, out);
  EXPECT_EQ(out.ToVector<float>(), (std::vector<float>{6, 7}));
}

// A collective completes after its device work (OnComplete::AfterDeviceWork: nothing is recorded
// on its worker's stream), except when its input carries a device error: an Embedding whose index
// is out of range found it in a kernel, and the wait on the all-reduced array must still raise it.
TEST(GpuDist, AnInputsDeviceErrorStillReachesTheWaitAfterTheCollective) {
  const NDArray indices = OnGpu({0, 7, 1}),
                table = NDArray::FromVector(std::vector<float>(15, 1), Shape{5, 3}).Copy(kGpu);
  NDArray rows =
      Invoke("Embedding", {indices, table}, {{"input_dim", "5"}, {"output_dim", "3"}})[0];
  World().AllReduce(rows, dist::ReduceOp::kSum);
  try {
    rows.WaitToRead();
    ADD_FAILURE() << "the Embedding's error was lost";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Embedding: index"), std::string::npos) << e.what();
  }
  NDArray clean = OnGpu({2, 3});  // and a collective on a clean input after it raises nothing
  World().AllReduce(clean, dist::ReduceOp::kSum);
  EXPECT_EQ(clean.ToVector<float>(), (std::vector<float>{2, 3}));
}

TEST(GpuDist, ACollectiveWaitsForItsInputsProducerAndItsConsumerForIt) {
  NDArray in = OnGpu({-1, -1, -1, -1}), out(Shape{4}, kGpu);
  World().AllGather(in, out);  // makes the communicator before anything is gated
  out.WaitToRead();
  const auto* progress = dist::internal::MpiProgress::Instance();
  ASSERT_NE(progress, nullptr);
  const NDArray values = OnGpu({7, 7, 7, 7});
  values.WaitToRead();
  std::unique_ptr<testing::StreamGate> gate;
  std::promise<void> gated;
  engine::Engine::Get()->PushSync(
      [&](engine::RunContext ctx) {
        gate = std::make_unique<testing::StreamGate>(*ctx.stream);
        ctx.stream->Copy(in.View().raw(), values.View().raw(), in.bytes());  // behind the gate
        gated.set_value();
      },
      kGpu, {values.var()}, {in.var()}, engine::FnProperty::kNormal, 0, "gated producer");
  const uint64_t before = progress->started();
  World().AllGather(in, out);
  NDArray plus = out + 1.0;  // the consumer
  gated.get_future().get();
  while (progress->started() == before) std::this_thread::yield();  // NCCL's kernels are queued
  gate->Open();
  EXPECT_EQ(out.ToVector<float>(), (std::vector<float>{7, 7, 7, 7}));
  EXPECT_EQ(plus.ToVector<float>(), (std::vector<float>{8, 8, 8, 8}));
}

Symbol Loss() {
  Symbol x = Symbol::Op("relu", {Symbol::Op("FullyConnected", {Symbol::Variable("data")},
                                            {{"num_hidden", "16"}}, "fc1")});
  x = Symbol::Op("FullyConnected", {x}, {{"num_hidden", "3"}}, "fc2");
  return Symbol::Op("SoftmaxCrossEntropy", {x, Symbol::Variable("label")}, {}, "loss");
}

TEST(GpuDist, ATrainerWithTheWorldOfOneTrainsAsWithoutIt) {
  const std::map<std::string, Shape> shapes = {{"data", Shape{8, 5}}, {"label", Shape{8}}};
  SeedRandom(9);
  Trainer plain(Loss(), shapes, Xavier(), SGD(0.1, 0.9, 1e-4, 1.0 / 8), {.device = kGpu});
  SeedRandom(9);
  Trainer with(Loss(), shapes, Xavier(), SGD(0.1, 0.9, 1e-4, 1.0 / 8),
               {.device = kGpu, .communicator = &World(), .bucket_bytes = 256});
  std::vector<float> x(40), y(8);
  for (int k = 0; k < 20; ++k) {
    for (int i = 0; i < 40; ++i) x[i] = std::sin(0.3f * i + k);
    for (int i = 0; i < 8; ++i) y[i] = static_cast<float>((i + k) % 3);
    const Trainer::ArrayMap batch = {{"data", NDArray::FromVector(x, Shape{8, 5})},
                                     {"label", NDArray::FromVector(y, Shape{8})}};
    plain.Step(batch);
    with.Step(batch);
  }
  for (const std::string& p : plain.parameter_names()) {
    const std::vector<float> a = plain.parameter(p).ToVector<float>(),
                             b = with.parameter(p).ToVector<float>();
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-6f * (1 + std::fabs(a[i]))) << p << "[" << i << "]";
  }
}

}  // namespace
}  // namespace weft
