// Kernel launches batched into CUDA graphs per stream (core/gpu/launch_batch.h): long chains of
// tiny ops cross many batch boundaries and still give exact results; reads from the CPU, copies
// and consumers on other streams in the middle of a chain see every kernel before them.
#include <gtest/gtest.h>

#include <vector>

#include "storage/ndarray.h"
#include "weft/imperative.h"
#include "weft/ops.h"

namespace weft {
namespace {

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
    if (i % 97 == 0) ASSERT_EQ(a.ToVector<float>()[5], static_cast<float>(i)) << "after " << i << " adds";
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

}  // namespace
}  // namespace weft
