// The embedding API as a user sees it: one header, one target. Arithmetic, typed op calls,
// device checks, and the intra-op thread budget.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>

#include "core/env.h"
#include "ops/cpu/internal/cpu_util.h"
#include "weft/weft.h"

namespace weft {
namespace {

TEST(WeftApi, ArithmeticAndTypedCalls) {
  NDArray a = NDArray::FromVector(std::vector<float>{1, -2, 3, -4}, Shape{2, 2});
  NDArray b = NDArray::FromVector(std::vector<float>{10, 20}, Shape{2});
  NDArray c = op::relu((a + b) * 0.5 - 1.0);  // broadcast b over rows
  EXPECT_EQ(c.ToVector<float>(), (std::vector<float>{4.5f, 8, 5.5f, 7}));
  EXPECT_EQ(op::add_n({a, a, a}).ToVector<float>(), (std::vector<float>{3, -6, 9, -12}));
  EXPECT_EQ((2.0 - a).ToVector<float>(), (std::vector<float>{1, 4, -1, 6}));
  EXPECT_EQ(op::Call("abs", {a})[0].ToVector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

// weft/ops.h expands the elementwise tables (ops/elementwise/unary_ops.h, binary_ops.h): every row
// has its typed call, the *_scalar ops too.
TEST(WeftApi, EveryElementwiseOpOfTheTablesHasATypedCall) {
  NDArray a = NDArray::FromVector(std::vector<float>{1, -2, 3, -4}, Shape{2, 2});
  EXPECT_EQ(op::abs(a).ToVector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(op::mul_scalar(a, {{"scalar", "2"}}).ToVector<float>(),
            (std::vector<float>{2, -4, 6, -8}));
  EXPECT_EQ(op::maximum(a, op::neg(a)).ToVector<float>(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(WeftApi, CompoundAssignmentWorksInPlace) {
  NDArray a = NDArray::FromVector(std::vector<float>{1, 2, 3, 4}, Shape{2, 2});
  NDArray alias = a;  // same memory
  NDArray b = NDArray::FromVector(std::vector<float>{10, 20}, Shape{2});
  a += b;
  a *= b;
  a -= b;
  a /= b;
  EXPECT_EQ(alias.ToVector<float>(),
            (std::vector<float>{10, 21, 12, 23}));  // ((x + b) * b - b) / b
  EXPECT_THROW(b += a, Error) << "a (2,) array cannot hold a (2, 2) result";
}

// Host memory standing in for a device's pool, so that an array can live on gpu:7 in a CPU-only
// build. Only the checks that compare devices are under test: no op runs there.
class HostBackedStorage : public Storage {
 public:
  explicit HostBackedStorage(Device d) : device_(d) {}
  Block Alloc(size_t bytes) override {
    return Block{bytes ? std::malloc(bytes) : nullptr, bytes, device_};
  }
  void Free(Block b) override { std::free(b.ptr); }
  void ReleaseCache() override {}
  StorageStats Stats() const override { return {}; }
  void ResetPeak() override {}

 private:
  Device device_;
};

TEST(WeftApi, InputsOnDifferentDevicesAreRejected) {
  RegisterStorageFactory(DeviceType::kGpu,
                         [](Device d) { return std::make_unique<HostBackedStorage>(d); });
  NDArray cpu(Shape{2}), gpu(Shape{2}, Device::Gpu(7));
  try {
    op::add(cpu, gpu);
    FAIL() << "inputs on two devices were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected every input on cpu, found input 1 on gpu:7"),
              std::string::npos)
        << e.what();
  }
  try {
    op::relu(gpu);
    FAIL() << "an op ran on a device it cannot run on";
  } catch (const Error& e) {
    // The CPU build has no GPU kernels; the CUDA build has them but no gpu:7 to run them on.
    const std::string message = e.what();
    EXPECT_TRUE(message.find("no implementation for gpu:7") != std::string::npos ||
                message.find("expected a CUDA GPU for gpu:7") != std::string::npos ||
                message.find("found gpu:7") != std::string::npos)
        << message;
  }
}

TEST(WeftApi, IntraOpThreadsTimesWorkersFitTheCores) {
  const int workers = engine::EngineOptions::FromEnv().cpu_workers;
  EXPECT_LE(cpu::IntraOpThreads() * workers, std::max(NumCores(), workers));
  int threads_in_op = 0;
  NDArray x(Shape{1});
  engine::Engine::Get()->PushSync(
      [&](engine::RunContext) {
        cpu::ConfigureOpenMPForThisThread();  // what every oneDNN kernel does first
        threads_in_op = omp_get_max_threads();
      },
      Device::Cpu(), {}, {x.var()});
  x.WaitToRead();
  EXPECT_EQ(threads_in_op, cpu::IntraOpThreads());
}

}  // namespace
}  // namespace weft
