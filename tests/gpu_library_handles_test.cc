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
#include "core/gpu/launch_batch.h"
#include "ops/gpu/library_handles.h"

namespace weft::gpu {
namespace {

// A non-blocking stream on gpu:0 for the test's scope.
class TestStream {
 public:
  TestStream() {
    DeviceGuard guard(0);
    WEFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~TestStream() {
    ForgetStream(stream_);  // a later stream may get this one's address (core/gpu/launch_batch.h)
    cudaStreamDestroy(stream_);
  }
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

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
  const TestStream a, b;
  const cudnnHandle_t dnn_a = CudnnHandle(0, a.get()), dnn_b = CudnnHandle(0, b.get());
  EXPECT_NE(dnn_a, dnn_b);
  EXPECT_EQ(StreamOf(dnn_a), a.get());
  EXPECT_EQ(StreamOf(dnn_b), b.get());
  const cublasHandle_t blas_a = CublasHandle(0, a.get()), blas_b = CublasHandle(0, b.get());
  EXPECT_NE(blas_a, blas_b);
  EXPECT_EQ(StreamOf(blas_a), a.get());
  EXPECT_EQ(StreamOf(blas_b), b.get());
}

TEST(LibraryHandles, TheSameThreadAndStreamGetTheSameHandle) {
  const TestStream a;
  EXPECT_EQ(CudnnHandle(0, a.get()), CudnnHandle(0, a.get()));
  EXPECT_EQ(CublasHandle(0, a.get()), CublasHandle(0, a.get()));
}

TEST(LibraryHandles, AnotherThreadOnTheSameStreamGetsItsOwnHandle) {
  const TestStream a;
  const cudnnHandle_t mine = CudnnHandle(0, a.get());
  cudnnHandle_t theirs = nullptr;
  std::thread([&] { theirs = CudnnHandle(0, a.get()); }).join();
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(StreamOf(theirs), a.get());
}

// A thread's handles go back to the pool when it exits; the next thread takes one and binds it to
// its own stream.
TEST(LibraryHandles, AnExitedThreadsHandleIsReusedAndRebound) {
  const TestStream a, b;
  cublasHandle_t first = nullptr, second = nullptr;
  std::thread([&] { first = CublasHandle(0, a.get()); }).join();
  std::thread([&] { second = CublasHandle(0, b.get()); }).join();
  EXPECT_EQ(first, second);
  EXPECT_EQ(StreamOf(second), b.get());
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
  EXPECT_NE(blas.find("cuBLAS error: cublasSetStream(nullptr, nullptr)"), std::string::npos) << blas;
  EXPECT_NE(blas.find("CUBLAS_STATUS_NOT_INITIALIZED"), std::string::npos) << blas;
}

}  // namespace
}  // namespace weft::gpu
