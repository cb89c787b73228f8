// Helpers for tests of GPU kernels and GPU operator computes: device memory and a stream owned by
// the test, and running one op's compute directly (no engine, no NDArray) on the CPU or on GPU 0
// from host arrays, so a GPU result can be compared with the CPU's.
//
//   OpCall call{"add", {}, {Shape{4, 6}, Shape{6}}};
//   std::vector<std::vector<float>> in = {..., ...}, out = {std::vector<float>(24)};
//   RunCompute(call, Device::Gpu(0), DType::kFloat32, in, {OpReq::kWrite}, out);
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "engine/gpu/gpu_stream.h"
#include "ops/op.h"
#include "storage/random.h"

namespace weft::testing {

// Device memory on the current GPU, freed at the end of the scope.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return data_; }
  void Upload(const void* host, size_t bytes);    // synchronous
  void Download(void* host, size_t bytes) const;  // synchronous

 private:
  void* data_ = nullptr;
};

// A non-blocking stream of the current GPU, destroyed at the end of the scope. Work goes on it
// through get() (engine/gpu/gpu_stream.h), as an op's does.
class TestStream {
 public:
  TestStream();
  engine::GpuStream& get() { return stream_; }
  // Launches what is batched, waits, then raises an error the kernels found in their inputs (as
  // the engine does at the wait on an op's outputs: engine/gpu/device_error.h).
  void Synchronize();

 private:
  engine::GpuStream stream_;
};

// weft::BinaryForward<weft::fn::Add, float, 4> for GPU 0, compiled on first use: y = a + b on n
// floats, arguments {&a, &b, &y, &n, &req} (long long n; int req, 1 to write). A launch of a few
// blocks is batched (engine/gpu/launch_batch.h).
const void* AddKernel();

// float <-> bfloat16 bits, rounding to nearest even (as the kernels do).
uint16_t ToBf16(float x);
float FromBf16(uint16_t bits);

struct OpCall {
  std::string op;
  AttrMap attrs;
  std::vector<Shape> input_shapes;
  bool is_train = false;
  RandomKey random;
};

// Runs the compute of `call.op` for `device` (Cpu or Gpu(0)) with `inputs` (one array per
// input, stored as `dtype`: float32, or bfloat16 on the GPU; an output of bytes, as bytes) and
// requests `req`. `outputs` holds each output's initial values (what kAddTo adds to) and receives
// the results; `inputs` receives the inputs' values after the call (optimizer state is updated in
// place). On a GPU the call runs on `stream` when given (and synchronizes it), else on a stream of
// its own.
void RunCompute(const OpCall& call, Device device, DType dtype,
                std::vector<std::vector<float>>& inputs, const std::vector<OpReq>& req,
                std::vector<std::vector<float>>& outputs, TestStream* stream = nullptr);

}  // namespace weft::testing
