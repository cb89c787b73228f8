// SoftmaxCrossEntropy and its backward op on the GPU (ops/cpu/softmax_cross_entropy.cc says what
// they compute). float32 and float64.
//
//   forward   logp = log_softmax(data) (cuDNN, into the workspace); loss[n] = -logp[n, label[n]]
//   backward  p = softmax(data) (cuDNN, into the workspace);
//             d_data[n, c] = out_grad[n] * (p[n, c] - (c == label[n]))
// The label lookups are two small kernels compiled at run time with NVRTC (see SceKernelSource).
//
// Labels: the CPU op raises a weft::Error for a label that is not a class index in [0, C); here
// the labels live on the GPU, and checking them on the host would synchronize the stream. So the
// GPU op writes NaN instead: the row's loss, and every d_data element of that row.
#include <span>
#include <string>

#include "ops/gpu/internal/cudnn_softmax.h"
#include "ops/gpu/internal/gpu_call.h"
#include "ops/gpu/internal/rtc_stopgap.h"
#include "ops/op.h"

namespace weft::gpu {
namespace {

// ---- kernels (to move onto the NVRTC kernel library) ----

// CUDA source of the label lookups, float and double: sce_loss_<T> and sce_grad_<T>.
const char* SceKernelSource() {
  return R"(
// `label` as a class index in [0, classes), or -1 when it is not one.
template <typename T>
__device__ long long ClassOf(T label, long long classes) {
  const double v = static_cast<double>(label);
  return (v >= 0 && v < static_cast<double>(classes) && v == floor(v)) ? static_cast<long long>(v) : -1;
}

template <typename T>
__device__ T NotANumber() { return static_cast<T>(__longlong_as_double(0x7ff8000000000000LL)); }

// logp (n, classes), label (n,) -> loss (n,) = -logp[i, label[i]], added to loss when accumulate.
template <typename T>
__device__ void Loss(long long n, long long classes, const T* logp, const T* label, int accumulate, T* loss) {
  const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const long long c = ClassOf(label[i], classes);
  const T v = c < 0 ? NotANumber<T>() : -logp[i * classes + c];
  loss[i] = accumulate ? loss[i] + v : v;
}

// dy (n,), p (n, classes), label (n,) -> dx (n, classes) = dy[i] * (p - onehot(label[i])),
// added to dx when accumulate.
template <typename T>
__device__ void Grad(long long n, long long classes, const T* dy, const T* p, const T* label, int accumulate, T* dx) {
  const long long at = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (at >= n * classes) return;
  const long long i = at / classes;
  const long long c = ClassOf(label[i], classes);
  const T v = c < 0 ? NotANumber<T>() : dy[i] * (p[at] - (at % classes == c ? T(1) : T(0)));
  dx[at] = accumulate ? dx[at] + v : v;
}

#define WEFT_SCE_KERNELS(T)                                                                              \
  extern "C" __global__ void sce_loss_##T(long long n, long long classes, const T* logp, const T* label, \
                                          int accumulate, T* loss) {                                     \
    Loss<T>(n, classes, logp, label, accumulate, loss);                                                  \
  }                                                                                                      \
  extern "C" __global__ void sce_grad_##T(long long n, long long classes, const T* dy, const T* p,       \
                                          const T* label, int accumulate, T* dx) {                       \
    Grad<T>(n, classes, dy, p, label, accumulate, dx);                                                   \
  }
WEFT_SCE_KERNELS(float)
WEFT_SCE_KERNELS(double)
)";
}

// sce_<what>_<float|double>, launched over `threads` threads with the arguments the kernels take:
// (n, classes, first, second[, third], accumulate, out).
void LaunchSce(const GpuCall& call, const std::string& what, DType dtype, int64_t threads, void** args) {
  const std::string name = "sce_" + what + (dtype == DType::kFloat64 ? "_double" : "_float");
  LaunchRtc(RtcKernel("softmax_cross_entropy", SceKernelSource(), name.c_str(), call.device()), threads, args,
            call.stream());
}

// ---- compute ----

// Forward, in: (data (N, C), label (N,)), out: (loss (N,)); backward, in: (out_grad (N,), data,
// label), out: (d_data (N, C)).
template <bool kBackward>
void SceGpu(const OpContext& ctx, const Attrs&, std::span<const TensorView> in, std::span<const OpReq> req,
            std::span<const TensorView> out) {
  if (req[0] == OpReq::kNull) return;
  const char* op = kBackward ? "_backward_SoftmaxCrossEntropy" : "SoftmaxCrossEntropy";
  const TensorView &data = in[kBackward ? 1 : 0], &label = in[kBackward ? 2 : 1];
  const DType dtype = data.dtype();
  CheckDType(op, dtype, {DType::kFloat32, DType::kFloat64});
  long long n = data.shape()[0], classes = data.shape()[1];
  int accumulate = req[0] == OpReq::kAddTo ? 1 : 0;
  const GpuCall call(ctx);
  void* probs = call.Workspace({data.bytes()})[0];  // p (backward) or log p (forward)
  SoftmaxForward(call, dtype, {n, classes, 1}, /*log=*/!kBackward, data.raw(), OpReq::kWrite, probs);
  const void* labels = label.raw();
  void* result = out[0].raw();
  if (kBackward) {
    const void* dy = in[0].raw();
    void* args[] = {&n, &classes, &dy, &probs, &labels, &accumulate, &result};
    LaunchSce(call, "grad", dtype, n * classes, args);
  } else {
    void* args[] = {&n, &classes, &probs, &labels, &accumulate, &result};
    LaunchSce(call, "loss", dtype, n, args);
  }
}

WEFT_REGISTER_COMPUTE(SoftmaxCrossEntropy, DeviceType::kGpu, SceGpu<false>);
WEFT_REGISTER_COMPUTE(_backward_SoftmaxCrossEntropy, DeviceType::kGpu, SceGpu<true>);

}  // namespace
}  // namespace weft::gpu
