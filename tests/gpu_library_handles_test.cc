// The cuDNN and cuBLAS handles GPU ops get: one per (thread, stream, device), bound to that
// stream, reused by later calls, and recycled to other threads when their thread exits.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "engine/gpu/gpu_stream.h"
#include "ops/gpu/library_handles.h"

namespace weft::gpu {
namespace {

// A non-blocking stream on gpu:0 for the test's scope, and its raw CUDA stream (what a handle
// bound to it reports).
class TestStream {
 public:
  TestStream() : stream_(0, {.blocking = false}) {}
  engine::GpuStream& get() { return stream_; }
  cudaStream_t raw() {
    return stream_.Library([](cudaStream_t s) { return s; });
  }

 private:
  engine::GpuStream stream_;
};

// The handles a scoped call lends for `stream` (returned here only to compare them).
cudnnHandle_t CudnnHandle(engine::GpuStream& stream) {
  return WithCudnn(stream, [](cudnnHandle_t h) { return h; });
}
cublasHandle_t CublasHandle(engine::GpuStream& stream) {
  return WithCublas(stream, [](cublasHandle_t h) { return h; });
}

cudaStream_t StreamOf(cudnnHandle_t h) {
  cudaStream_t s = nullptr;
  WEFT_CUDNN_CHECK(cudnnGetStream(h, &s));
  return s;
}

cudaStream_t StreamOf(cublasHandle_t h) {
  cudaStream_t s = nullptr;
  WEFT_CUBLAS_CHECK(cublasGetStream(h, &s));
  return s;
}

TEST(LibraryHandles, TwoStreamsGetDifferentHandlesBoundToThem) {
  TestStream a, b;
  const cudnnHandle_t dnn_a = CudnnHandle(a.get()), dnn_b = CudnnHandle(b.get());
  EXPECT_NE(dnn_a, dnn_b);
  EXPECT_EQ(StreamOf(dnn_a), a.raw());
  EXPECT_EQ(StreamOf(dnn_b), b.raw());
  const cublasHandle_t blas_a = CublasHandle(a.get()), blas_b = CublasHandle(b.get());
  EXPECT_NE(blas_a, blas_b);
  EXPECT_EQ(StreamOf(blas_a), a.raw());
  EXPECT_EQ(StreamOf(blas_b), b.raw());
}

TEST(LibraryHandles, TheSameThreadAndStreamGetTheSameHandle) {
  TestStream a;
  EXPECT_EQ(CudnnHandle(a.get()), CudnnHandle(a.get()));
  EXPECT_EQ(CublasHandle(a.get()), CublasHandle(a.get()));
}

TEST(LibraryHandles, AnotherThreadOnTheSameStreamGetsItsOwnHandle) {
  TestStream a;
  const cudnnHandle_t mine = CudnnHandle(a.get());
  cudnnHandle_t theirs = nullptr;
  std::thread([&] { theirs = CudnnHandle(a.get()); }).join();
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(StreamOf(theirs), a.raw());
}

// A thread's handles go back to the pool when it exits; the next thread takes one and binds it to
// its own stream.
TEST(LibraryHandles, AnExitedThreadsHandleIsReusedAndRebound) {
  TestStream a, b;
  cublasHandle_t first = nullptr, second = nullptr;
  std::thread([&] { first = CublasHandle(a.get()); }).join();
  std::thread([&] { second = CublasHandle(b.get()); }).join();
  EXPECT_EQ(first, second);
  EXPECT_EQ(StreamOf(second), b.raw());
}

// The message of the weft::Error that `f` throws, or "<no error>".
template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(LibraryHandles, FailedCallsThrowNamingTheCallAndTheStatus) {
  const std::string dnn = ErrorOf([] { WEFT_CUDNN_CHECK(cudnnSetStream(nullptr, nullptr)); });
  EXPECT_NE(dnn.find("cuDNN error: cudnnSetStream(nullptr, nullptr)"), std::string::npos) << dnn;
  EXPECT_NE(dnn.find("CUDNN_STATUS_BAD_PARAM"), std::string::npos) << dnn;
  const std::string blas = ErrorOf([] { WEFT_CUBLAS_CHECK(cublasSetStream(nullptr, nullptr)); });
  EXPECT_NE(blas.find("cuBLAS error: cublasSetStream(nullptr, nullptr)"), std::string::npos)
      << blas;
  EXPECT_NE(blas.find("CUBLAS_STATUS_NOT_INITIALIZED"), std::string::npos) << blas;
}

}  // namespace
}  // namespace weft::gpu
