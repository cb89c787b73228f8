// The NVRTC kernel library: compiles and runs a kernel, answers a second request from its
// process cache, writes a disk cache that a fresh library reuses, ignores a corrupt cache file
// (and rewrites it), and reports a compile error with the kernel's name and NVRTC's log.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "ops/gpu/rtc/kernel_library.h"
#include "tests/gpu_op_test_util.h"
#include "tests/weft_test_util.h"

namespace weft::gpu::rtc {
namespace {

using weft::testing::DeviceBuffer;
using weft::testing::TestStream;

// y[i] = i * scale for i < n.
const char* kRampSource = R"(
extern "C" __global__ void ramp(float* y, long long n, float scale) {
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    y[i] = i * scale;
  }
}
)";

KernelRequest Ramp() { return {"ramp_test.cu", kRampSource, "ramp", {}}; }

// Runs `kernel` (ramp's signature) on the current GPU and checks what it wrote.
void ExpectRampRuns(const Kernel& kernel) {
  const long long n = 1000;
  float scale = 0.5f;
  DeviceBuffer y(n * sizeof(float));
  void* y_ptr = y.get();
  long long count = n;
  void* args[] = {&y_ptr, &count, &scale};
  TestStream stream;
  kernel.Launch(dim3(4), dim3(256), args, stream.get());
  stream.Synchronize();
  std::vector<float> host(n);
  y.Download(host.data(), n * sizeof(float));
  for (long long i = 0; i < n; ++i) ASSERT_EQ(host[i], i * 0.5f) << "at " << i;
}

// A fresh, empty folder under the test's temporary directory.
std::string FreshDir(const std::string& name) {
  const std::string dir = weft::testing::TempPath(name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<std::string> CacheFiles(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path().string());
  return files;
}

TEST(KernelLibrary, CompilesAndRunsAUserSource) {
  KernelLibrary library("");
  ExpectRampRuns(library.Get(Ramp(), 0));
  EXPECT_EQ(library.stats().compiles, 1);
}

TEST(KernelLibrary, RunsAnEmbeddedTemplateKernel) {
  KernelLibrary library("");
  const Kernel fill = library.Get({"fill.cuh", "", "weft::Fill<float, 1>", {}}, 0);
  const long long n = 777;
  DeviceBuffer y(n * sizeof(float));
  void* y_ptr = y.get();
  long long count = n;
  double value = 3.25;
  int req = 1;  // kReqWrite
  void* args[] = {&y_ptr, &count, &value, &req};
  TestStream stream;
  fill.Launch(dim3(2), dim3(256), args, stream.get());
  stream.Synchronize();
  std::vector<float> host(n);
  y.Download(host.data(), n * sizeof(float));
  for (float v : host) ASSERT_EQ(v, 3.25f);
}

// Libraries loaded and unloaded in turn while one stream batches their kernels (engine/gpu/
// launch_batch.h keeps each kernel's parameter sizes and chains naming it): a kernel of a new
// library, perhaps at an unloaded one's address, with other parameters, still gets its own.
TEST(KernelLibrary, KernelsOfUnloadedLibrariesLeaveNothingBehind) {
  const char* set_source = R"(
extern "C" __global__ void set(int unused, float* y, double value, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = (float)value;
})";
  const std::string dir = FreshDir("rtc_cache_reload");
  const long long n = 1000;
  DeviceBuffer y(n * sizeof(float));
  void* y_ptr = y.get();
  TestStream stream;  // one stream throughout: its batch outlives every library
  for (int round = 0; round < 12; ++round) {
    KernelLibrary library(dir);
    const bool ramp = round % 2 == 0;
    const Kernel k =
        library.Get(ramp ? Ramp() : KernelRequest{"set_test.cu", set_source, "set", {}}, 0);
    long long count = n;
    float scale = 0.5f;
    int unused = 0, small_n = static_cast<int>(n);
    double value = round;
    void* ramp_args[] = {&y_ptr, &count, &scale};
    void* set_args[] = {&unused, &y_ptr, &value, &small_n};
    k.Launch(dim3(4), dim3(256),
             ramp ? std::span<void* const>(ramp_args) : std::span<void* const>(set_args),
             stream.get());
    stream.Synchronize();
    std::vector<float> host(n);
    y.Download(host.data(), n * sizeof(float));
    for (long long i = 0; i < n; ++i) {
      ASSERT_EQ(host[i], ramp ? i * 0.5f : static_cast<float>(round))
          << "round " << round << " at " << i;
    }
  }
}

TEST(KernelLibrary, SecondRequestIsAnsweredFromTheProcessCache) {
  KernelLibrary library("");
  const Kernel first = library.Get(Ramp(), 0);
  const Kernel second = library.Get(Ramp(), 0);
  EXPECT_EQ(first.handle(), second.handle());
  EXPECT_EQ(library.stats().compiles, 1);
  EXPECT_EQ(library.stats().memory_hits, 1);
  KernelRequest other = Ramp();
  other.options = {"-DUNUSED=1"};  // other options: another kernel
  library.Get(other, 0);
  EXPECT_EQ(library.stats().compiles, 2);
}

TEST(KernelLibrary, ThreadsAskingAtOnceShareOneCompile) {
  KernelLibrary library("");
  std::vector<std::thread> threads;
  std::vector<cudaKernel_t> handles(8);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] { handles[t] = library.Get(Ramp(), 0).handle(); });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(library.stats().compiles, 1);
  EXPECT_EQ(library.stats().memory_hits, 7);
  for (cudaKernel_t h : handles) EXPECT_EQ(h, handles[0]);
}

TEST(KernelLibrary, DiskCacheIsWrittenAndReusedByAFreshLibrary) {
  const std::string dir = FreshDir("rtc_cache_reuse");
  {
    KernelLibrary writer(dir);
    ExpectRampRuns(writer.Get(Ramp(), 0));
    EXPECT_EQ(writer.stats().compiles, 1);
    EXPECT_EQ(writer.stats().disk_writes, 1);
  }
  ASSERT_EQ(CacheFiles(dir).size(), 1u);
  KernelLibrary reader(dir);
  ExpectRampRuns(reader.Get(Ramp(), 0));
  EXPECT_EQ(reader.stats().compiles, 0);
  EXPECT_EQ(reader.stats().disk_hits, 1);
}

TEST(KernelLibrary, CorruptCacheFileIsIgnoredAndRewritten) {
  const std::string dir = FreshDir("rtc_cache_corrupt");
  KernelLibrary(dir).Get(Ramp(), 0);
  const std::vector<std::string> files = CacheFiles(dir);
  ASSERT_EQ(files.size(), 1u);
  const std::string path = files[0];
  const uintmax_t size = std::filesystem::file_size(path);
  for (const uintmax_t keep : {uintmax_t{0}, uintmax_t{5}, size / 2, size - 1}) {
    std::filesystem::resize_file(path, keep);  // truncated
    KernelLibrary library(dir);
    ExpectRampRuns(library.Get(Ramp(), 0));
    EXPECT_EQ(library.stats().disk_rejects, 1) << "truncated to " << keep;
    EXPECT_EQ(library.stats().compiles, 1);
    EXPECT_EQ(library.stats().disk_writes, 1);
    EXPECT_EQ(std::filesystem::file_size(path), size);
  }
  {
    std::fstream f(
        path, std::ios::in | std::ios::out | std::ios::binary);  // one byte of the CUBIN flipped
    f.seekg(static_cast<std::streamoff>(size / 2));
    const char byte = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put(static_cast<char>(~byte));
  }
  KernelLibrary flipped(dir);
  ExpectRampRuns(flipped.Get(Ramp(), 0));
  EXPECT_EQ(flipped.stats().disk_rejects, 1);
  EXPECT_EQ(flipped.stats().compiles, 1);
  KernelLibrary after(dir);
  after.Get(Ramp(), 0);
  EXPECT_EQ(after.stats().disk_hits, 1);
}

TEST(KernelLibrary, CompileErrorNamesTheKernelAndHoldsTheLog) {
  KernelLibrary library("");
  const KernelRequest broken{
      "broken_test.cu",
      "extern \"C\" __global__ void broken_kernel(float* y) { y[0] = no_such_name; }",
      "broken_kernel",
      {}};
  weft::testing::ExpectErrorContains([&] { library.Get(broken, 0); },
                                     {"broken_kernel", "broken_test.cu", "no_such_name", "sm_"});
  std::string error;
  EXPECT_FALSE(library.TryGet(broken, 0, &error).has_value());
  EXPECT_NE(error.find("no_such_name"), std::string::npos) << error;
  EXPECT_EQ(library.stats().compiles, 1);  // the failure is remembered
}

TEST(KernelLibrary, UnknownEmbeddedSourceIsAnError) {
  KernelLibrary library("");
  weft::testing::ExpectErrorContains(
      [&] {
        library.Get({"no_such_file.cuh", "", "k", {}}, 0);
      },
      {"no_such_file.cuh"});
  EXPECT_FALSE(EmbeddedSourceNames().empty());
}

TEST(KernelLibrary, LoadsOnEveryGpuAndCompilesOncePerArchitecture) {
  if (GpuCount() < 2) GTEST_SKIP() << "needs two GPUs";
  KernelLibrary library("");
  for (int device = 0; device < GpuCount(); ++device) {
    DeviceGuard guard(device);  // the buffers and the stream of ExpectRampRuns are on this GPU
    ExpectRampRuns(library.Get(Ramp(), device));
  }
  bool same_arch = true;
  for (int device = 1; device < GpuCount(); ++device)
    same_arch &= ComputeCapability(device) == ComputeCapability(0);
  if (same_arch) {
    EXPECT_EQ(library.stats().compiles, 1);
  }
}

}  // namespace
}  // namespace weft::gpu::rtc
