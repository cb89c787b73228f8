#include "tests/gpu_op_test_util.h"

#include <cstring>
#include <exception>
#include <memory>

#include "core/bfloat16.h"
#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "core/tensor_view.h"
#include "ops/gpu/rtc/kernel_library.h"

namespace weft::testing {

DeviceBuffer::DeviceBuffer(size_t bytes) {
  WEFT_CUDA_CHECK(cudaMalloc(&data_, bytes == 0 ? 1 : bytes));
}
DeviceBuffer::~DeviceBuffer() { cudaFree(data_); }
void DeviceBuffer::Upload(const void* host, size_t bytes) {
  WEFT_CUDA_CHECK(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice));
  // From pageable memory the copy may still be in flight when cudaMemcpy returns, and a
  // non-blocking stream (TestStream) does not wait for it.
  WEFT_CUDA_CHECK(cudaDeviceSynchronize());
}
void DeviceBuffer::Download(void* host, size_t bytes) const {
  WEFT_CUDA_CHECK(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost));
}

const void* AddKernel() {
  static const void* kernel = reinterpret_cast<const void*>(
      gpu::rtc::KernelLibrary::Global()
          .Get({"binary.cuh", "", "weft::BinaryForward<weft::fn::Add, float, 4>", {}}, 0)
          .handle());
  return kernel;
}

namespace {

int CurrentDevice() {
  int device = 0;
  WEFT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

}  // namespace

TestStream::TestStream() : stream_(CurrentDevice(), {.blocking = false}) {}

void TestStream::Synchronize() {
  stream_.Synchronize();
  if (std::exception_ptr error = stream_.TakeErrors().TakeFailure()) std::rethrow_exception(error);
}

uint16_t ToBf16(float x) { return BFloat16::FromFloat(x).bits; }

float FromBf16(uint16_t bits) { return BFloat16{bits}.ToFloat(); }

namespace {

// One array in the memory of the device a compute runs on.
class TestArray {
 public:
  TestArray(Device device, DType dtype, const Shape& shape, const std::vector<float>& values)
      : device_(device), dtype_(dtype), shape_(shape) {
    WEFT_CHECK_EQ(static_cast<int64_t>(values.size()), shape.Size())
        << "test array of shape " << shape;
    host_.resize(values.size() * DTypeSize(dtype));
    if (dtype == DType::kBFloat16) {
      auto* bits = reinterpret_cast<uint16_t*>(host_.data());
      for (size_t i = 0; i < values.size(); ++i) bits[i] = ToBf16(values[i]);
    } else if (dtype == DType::kUInt8) {  // bytes (an RNN's reserve)
      for (size_t i = 0; i < values.size(); ++i) host_[i] = static_cast<char>(values[i]);
    } else {
      std::memcpy(host_.data(), values.data(), host_.size());
    }
    if (device.is_gpu()) {
      device_memory_ = std::make_unique<DeviceBuffer>(host_.size());
      device_memory_->Upload(host_.data(), host_.size());
    }
  }
  TensorView View() const {
    return TensorView(device_memory_ ? device_memory_->get() : const_cast<char*>(host_.data()),
                      shape_, dtype_, device_);
  }
  std::vector<float> Values() {
    if (device_memory_) device_memory_->Download(host_.data(), host_.size());
    std::vector<float> values(shape_.Size());
    if (dtype_ == DType::kBFloat16) {
      const auto* bits = reinterpret_cast<const uint16_t*>(host_.data());
      for (size_t i = 0; i < values.size(); ++i) values[i] = FromBf16(bits[i]);
    } else if (dtype_ == DType::kUInt8) {
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint8_t>(host_[i]);
    } else {
      std::memcpy(values.data(), host_.data(), host_.size());
    }
    return values;
  }

 private:
  Device device_;
  DType dtype_;
  Shape shape_;
  std::vector<char> host_;
  std::unique_ptr<DeviceBuffer> device_memory_;
};

}  // namespace

void RunCompute(const OpCall& call, Device device, DType dtype,
                std::vector<std::vector<float>>& inputs, const std::vector<OpReq>& req,
                std::vector<std::vector<float>>& outputs, TestStream* stream) {
  const Op& op = GetOp(call.op);
  const Attrs attrs = ParseAttrs(op, call.attrs);
  const std::vector<Shape> out_shapes = InferShapes(op, attrs, call.input_shapes, device.type);
  WEFT_CHECK(op.On(device.type).compute) << call.op << " has no compute on " << device;
  std::vector<std::unique_ptr<TestArray>> in, out;
  std::vector<TensorView> in_views, out_views;
  for (size_t i = 0; i < inputs.size(); ++i) {
    in.push_back(std::make_unique<TestArray>(device, dtype, call.input_shapes[i], inputs[i]));
    in_views.push_back(in.back()->View());
  }
  const std::vector<DType> out_types =
      InferTypes(op, attrs, std::vector<DType>(inputs.size(), dtype));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const DType type = out_types[i] == DType::kUInt8 ? DType::kUInt8 : dtype;
    out.push_back(std::make_unique<TestArray>(device, type, out_shapes[i], outputs[i]));
    out_views.push_back(out.back()->View());
  }
  std::unique_ptr<TestStream> own;
  if (device.is_gpu() && stream == nullptr) stream = (own = std::make_unique<TestStream>()).get();
  OpContext ctx;
  ctx.run.device = device;
  ctx.run.stream = stream ? &stream->get() : nullptr;
  ctx.is_train = call.is_train;
  ctx.random = call.random;
  op.On(device.type).compute(ctx, attrs, in_views, req, out_views);
  if (stream) stream->Synchronize();
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = in[i]->Values();
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i] = out[i]->Values();
}

}  // namespace weft::testing
