// Kernel launches batched into CUDA graphs per stream (engine/gpu/launch_batch.h): long chains of
// tiny ops cross many batch boundaries and still give exact results; reads from the CPU, copies
// and consumers on other streams in the middle of a chain see every kernel before them; a large
// kernel, launched at once, still runs after the small ones batched before it on its stream; and
// whatever else is queued through the stream object (engine/gpu/gpu_stream.h) after a batched
// kernel sees its result.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "engine/gpu/gpu_stream.h"
#include "engine/gpu/launch_batch.h"
#include "storage/ndarray.h"
#include "tests/gpu_op_test_util.h"
#include "weft/imperative.h"
#include "weft/ops.h"

namespace weft {
namespace {

using testing::AddKernel;
using testing::DeviceBuffer;
using testing::TestStream;

const Device kGpu = Device::Gpu(0);

TEST(GpuLaunchBatch, AChainOfTinyOpsCrossesBatchesExactly) {
  NDArray a(Shape{16}, kGpu), b(Shape{16}, kGpu);
  a.Fill(0), b.Fill(1);
  const Op& add = GetOp("add");
  const Attrs attrs = ParseAttrs(add, {});
  const std::vector<NDArray> in = {a, b}, out = {a};
  for (int i = 1; i <= 1000; ++i) {
    InvokeInto(add, attrs, in, out);
    // A CPU read now and then: the kernels still batched must run before it.
    if (i % 97 == 0) {
      ASSERT_EQ(a.ToVector<float>()[5], static_cast<float>(i)) << "after " << i << " adds";
    }
  }
  EXPECT_EQ(a.ToVector<float>(), std::vector<float>(16, 1000.f));
}

TEST(GpuLaunchBatch, ConsumersOnOtherStreamsAndCopiesSeeEarlierKernels) {
  std::vector<NDArray> xs;
  for (int k = 0; k < 8; ++k) {
    xs.emplace_back(Shape{1024}, kGpu);
    xs.back().Fill(0);
  }
  NDArray one(Shape{1024}, kGpu);
  one.Fill(1);
  // Independent chains spread over the compute streams; each is then read by ops that may run on
  // another stream, and copied to the host while more kernels follow.
  for (int step = 0; step < 50; ++step) {
    for (NDArray& x : xs) x += one;
  }
  NDArray total = xs[0];
  for (int k = 1; k < 8; ++k) total = total + xs[k];
  NDArray host = total.Copy(Device::Cpu());
  for (NDArray& x : xs) x += one;
  EXPECT_EQ(host.ToVector<float>(), std::vector<float>(1024, 400.f));
  EXPECT_EQ(xs[3].ToVector<float>(), std::vector<float>(1024, 51.f));
}

void Upload(DeviceBuffer& buffer, long long n, float value) {
  const std::vector<float> host(n, value);
  buffer.Upload(host.data(), n * sizeof(float));
}

std::vector<float> Download(const DeviceBuffer& buffer, long long n) {
  std::vector<float> host(n);
  buffer.Download(host.data(), n * sizeof(float));
  return host;
}

// On one stream: x[0:16] += 1 (a tiny kernel, batched), then z += x over 2M floats (large enough
// to be launched at once), ten times. Were the large kernel launched before the batch, it would
// read x before the tiny add and z[0] would fall short of 1 + 2 + ... + 10.
TEST(GpuLaunchBatch, ALargeKernelRunsAfterTheBatchBeforeIt) {
  constexpr long long kBig = 1 << 21;
  DeviceBuffer x_buffer(kBig * sizeof(float)), z_buffer(kBig * sizeof(float)),
      one_buffer(16 * sizeof(float));
  Upload(x_buffer, kBig, 0), Upload(z_buffer, kBig, 0), Upload(one_buffer, 16, 1);
  void *x = x_buffer.get(), *z = z_buffer.get(), *one = one_buffer.get();
  long long small_n = 16, big_n = kBig;
  int write = 1;
  void* small_args[] = {&x, &one, &x, &small_n, &write};
  void* big_args[] = {&z, &x, &z, &big_n, &write};
  const unsigned big_blocks = static_cast<unsigned>(gpu::kDirectLaunchThreads / 256);
  TestStream stream;
  for (int i = 0; i < 10; ++i) {
    stream.get().Launch(AddKernel(), dim3(1), dim3(256), small_args);
    stream.get().Launch(AddKernel(), dim3(big_blocks), dim3(256), big_args);
  }
  stream.Synchronize();
  EXPECT_EQ(Download(z_buffer, 16), std::vector<float>(16, 55.f));
}

// Chains are kept per length and only nodes whose arguments changed are set again: one node of
// four full batches alternates between two arrays, and each batch must see its own arguments.
TEST(GpuLaunchBatch, ANodeWhoseArgumentsChangedIsSetAgain) {
  DeviceBuffer a0_buffer(16 * sizeof(float)), a1_buffer(16 * sizeof(float)),
      one_buffer(16 * sizeof(float));
  Upload(a0_buffer, 16, 0), Upload(a1_buffer, 16, 0), Upload(one_buffer, 16, 1);
  void* one = one_buffer.get();
  long long n = 16;
  int write = 1;
  TestStream stream;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < gpu::kMaxBatch; ++i) {
      void* a = i == 17 && round % 2 == 1 ? a1_buffer.get() : a0_buffer.get();
      void* args[] = {&a, &one, &a, &n, &write};
      stream.get().Launch(AddKernel(), dim3(1), dim3(256), args);
    }
  }
  stream.Synchronize();
  EXPECT_EQ(Download(a0_buffer, 16), std::vector<float>(16, 4.f * gpu::kMaxBatch - 2));
  EXPECT_EQ(Download(a1_buffer, 16), std::vector<float>(16, 2.f));
}

// A batched launch copies each argument by the kernel's parameter sizes, so more arguments than
// the kernel has parameters is an error naming the count (a direct launch cannot tell).
TEST(GpuLaunchBatch, ExtraArgumentsRaiseACudaError) {
  if (!GetEnvBool("WEFT_GPU_LAUNCH_BATCH", true))
    GTEST_SKIP() << "launches are not batched (WEFT_GPU_LAUNCH_BATCH=0)";
  DeviceBuffer x_buffer(16 * sizeof(float));
  void* x = x_buffer.get();
  long long n = 16;
  int write = 1, extra = 0;
  void* args[] = {&x, &x, &x, &n, &write, &extra};
  TestStream stream;
  try {
    stream.get().Launch(AddKernel(), dim3(1), dim3(256), args);
    ADD_FAILURE() << "six arguments for a kernel of five parameters were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("6 arguments given, but the kernel has no parameter 5"),
              std::string::npos)
        << e.what();
  }
  stream.Synchronize();
}

// A kernel that cannot launch (2048 threads a block) between two good ones: the good ones still
// run, and the error is raised by the stream's next flush even when the idle hook flushed first.
TEST(GpuLaunchBatch, ABadLaunchRaisesACudaErrorAtTheNextFlush) {
  if (!GetEnvBool("WEFT_GPU_LAUNCH_BATCH", true))
    GTEST_SKIP() << "launches are not batched (WEFT_GPU_LAUNCH_BATCH=0)";
  DeviceBuffer x_buffer(16 * sizeof(float)), one_buffer(16 * sizeof(float));
  Upload(x_buffer, 16, 0), Upload(one_buffer, 16, 1);
  void *x = x_buffer.get(), *one = one_buffer.get();
  long long n = 16;
  int write = 1;
  void* args[] = {&x, &one, &x, &n, &write};
  TestStream stream;
  stream.get().Launch(AddKernel(), dim3(1), dim3(256), args);
  stream.get().Launch(AddKernel(), dim3(1), dim3(2048), args);
  stream.get().Launch(AddKernel(), dim3(1), dim3(256), args);
  stream.get().FlushWhenIdle();  // keeps the failure
  try {
    stream.get().Flush();
    ADD_FAILURE() << "the failed launch was not raised";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("launching a batch of kernels: cudaErrorInvalid"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(stream.get().Flush()) << "raised once";
  stream.Synchronize();
  EXPECT_EQ(Download(x_buffer, 16), std::vector<float>(16, 2.f))
      << "the good kernels around the bad one ran";
}

// ---- Work queued through the stream object after a batched kernel ----------------------------

// n floats of pinned host memory, which kernels write through its device address (unified
// addressing), so the host can read what a kernel wrote without a copy.
class PinnedFloats {
 public:
  explicit PinnedFloats(size_t n) : n_(n) {
    WEFT_CUDA_CHECK(cudaMallocHost(&data_, n * sizeof(float)));
  }
  ~PinnedFloats() { cudaFreeHost(data_); }
  PinnedFloats(const PinnedFloats&) = delete;
  PinnedFloats& operator=(const PinnedFloats&) = delete;
  float* get() const { return data_; }
  std::vector<float> Values() const { return std::vector<float>(data_, data_ + n_); }

 private:
  size_t n_;
  float* data_ = nullptr;
};

// Each test launches x += 1 (one block: batched, not launched until something flushes the batch;
// nothing else does here, as no engine worker idles on this stream), then queues one operation
// that is not a kernel through the stream object. That operation must follow the kernel: were it
// queued without launching the batch first, it would run while the kernel is still in the host's
// batch and see x from before it. With WEFT_GPU_LAUNCH_BATCH=0 the kernel is launched at once and
// the tests check plain stream order.
class WorkAfterABatchedKernel : public ::testing::Test {
 protected:
  static constexpr long long kN = 16;

  WorkAfterABatchedKernel() : x_(kN), one_(kN), y_(kN * sizeof(float)) {
    std::fill_n(x_.get(), kN, 0.f);
    std::fill_n(one_.get(), kN, 1.f);
  }

  // x += 1 on the stream; x then holds kAfter everywhere.
  void AddOneToX() {
    void *x = x_.get(), *one = one_.get();
    long long n = kN;
    int write = 1;
    void* args[] = {&x, &one, &x, &n, &write};
    stream().Launch(AddKernel(), dim3(1), dim3(256), args);
  }

  engine::GpuStream& stream() { return stream_.get(); }

  static constexpr float kAfter = 1.f;
  static constexpr size_t kBytes = kN * sizeof(float);
  PinnedFloats x_, one_;
  DeviceBuffer y_;
  TestStream stream_;
};

TEST_F(WorkAfterABatchedKernel, ACopyReadsWhatTheKernelWrote) {
  AddOneToX();
  stream().Copy(y_.get(), x_.get(), kBytes);
  stream().Synchronize();
  EXPECT_EQ(Download(y_, kN), std::vector<float>(kN, kAfter));
}

TEST_F(WorkAfterABatchedKernel, A2dCopyReadsWhatTheKernelWrote) {
  AddOneToX();
  constexpr size_t kRow = 4 * sizeof(float);  // x as 4 rows of 4
  stream().Copy2D(y_.get(), kRow, x_.get(), kRow, kRow, 4);
  stream().Synchronize();
  EXPECT_EQ(Download(y_, kN), std::vector<float>(kN, kAfter));
}

TEST_F(WorkAfterABatchedKernel, AMemsetOverwritesWhatTheKernelWrote) {
  AddOneToX();
  stream().Memset(x_.get(), 0, kBytes / 2);  // the first half
  stream().Synchronize();
  std::vector<float> want(kN, kAfter);
  std::fill_n(want.begin(), kN / 2, 0.f);
  EXPECT_EQ(x_.Values(), want) << "the first half: the memset's zeros over the kernel's ones";
}

TEST_F(WorkAfterABatchedKernel, AHostFunctionSeesWhatTheKernelWrote) {
  AddOneToX();
  struct Seen {
    const float* x;
    std::vector<float> values;
  } seen{x_.get(), {}};
  stream().HostFunc(
      [](void* p) {
        auto* s = static_cast<Seen*>(p);
        s->values.assign(s->x, s->x + kN);
      },
      &seen);
  stream().Synchronize();
  EXPECT_EQ(seen.values, std::vector<float>(kN, kAfter));
}

TEST_F(WorkAfterABatchedKernel, AnEventCompletesAfterTheKernel) {
  AddOneToX();
  cudaEvent_t event = nullptr;
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  stream().Record(event);
  WEFT_CUDA_CHECK(cudaEventSynchronize(event));
  EXPECT_EQ(x_.Values(), std::vector<float>(kN, kAfter))
      << "read once the event completed, before any other wait";
  cudaEventDestroy(event);
  stream().Synchronize();
}

TEST_F(WorkAfterABatchedKernel, ALibraryCallOnTheRawStreamReadsWhatTheKernelWrote) {
  AddOneToX();
  stream().Library([&](cudaStream_t raw) {
    WEFT_CUDA_CHECK(cudaMemcpyAsync(y_.get(), x_.get(), kBytes, cudaMemcpyDefault, raw));
  });
  stream().Synchronize();
  EXPECT_EQ(Download(y_, kN), std::vector<float>(kN, kAfter));
}

// An event on the legacy stream after all streams (what a pool's Free without a stream records)
// follows the kernels still batched on every blocking stream: it launches their batches first.
TEST(GpuLaunchBatch, AnEventAfterAllStreamsCompletesAfterTheirBatchedKernels) {
  constexpr long long kN = 16;
  PinnedFloats x(kN), one(kN);
  std::fill_n(x.get(), kN, 0.f);
  std::fill_n(one.get(), kN, 1.f);
  engine::GpuStream a(0), b(0);  // blocking, as the engine's: the legacy stream orders after them
  void *x_ptr = x.get(), *one_ptr = one.get();
  long long n = kN;
  int write = 1;
  void* args[] = {&x_ptr, &one_ptr, &x_ptr, &n, &write};
  a.Launch(AddKernel(), dim3(1), dim3(256), args);  // x += 1, in a's batch
  cudaEvent_t event = nullptr;
  WEFT_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  engine::GpuStream::RecordAfterAll(event);
  WEFT_CUDA_CHECK(cudaEventSynchronize(event));
  EXPECT_EQ(x.Values(), std::vector<float>(kN, 1.f));
  b.Launch(AddKernel(), dim3(1), dim3(256), args);  // and again, in b's batch
  engine::GpuStream::RecordAfterAll(event);
  WEFT_CUDA_CHECK(cudaEventSynchronize(event));
  EXPECT_EQ(x.Values(), std::vector<float>(kN, 2.f));
  cudaEventDestroy(event);
}

}  // namespace
}  // namespace weft
