#include "ops/gpu/internal/rtc_stopgap.h"

#include <nvrtc.h>

#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/gpu/cuda_check.h"

namespace weft::gpu {
namespace {

#define WEFT_NVRTC_CHECK(call)                                                                   \
  do {                                                                                           \
    const nvrtcResult weft_nvrtc_result_ = (call);                                               \
    if (weft_nvrtc_result_ != NVRTC_SUCCESS) {                                                   \
      WEFT_THROW("NVRTC error: " << #call << ": " << nvrtcGetErrorString(weft_nvrtc_result_)); \
    }                                                                                            \
  } while (0)

// Owns one NVRTC program.
class Program {
 public:
  Program(const char* name, const char* source) {
    WEFT_NVRTC_CHECK(nvrtcCreateProgram(&program_, source, name, 0, nullptr, nullptr));
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return program_; }

 private:
  nvrtcProgram program_ = nullptr;
};

std::string CompileLog(nvrtcProgram p) {
  size_t size = 0;
  if (nvrtcGetProgramLogSize(p, &size) != NVRTC_SUCCESS || size == 0) return "";
  std::string log(size, '\0');
  nvrtcGetProgramLog(p, log.data());
  return log;
}

// `source` compiled to a cubin for sm_<arch>.
std::vector<char> CompileCubin(const char* name, const char* source, int arch) {
  const Program program(name, source);
  const std::string arch_flag = "--gpu-architecture=sm_" + std::to_string(arch);
  const char* options[] = {arch_flag.c_str(), "--std=c++17"};
  if (nvrtcCompileProgram(program.get(), 2, options) != NVRTC_SUCCESS) {
    WEFT_THROW("NVRTC: kernel source '" << name << "' does not compile for sm_" << arch << ":\n"
                                        << CompileLog(program.get()));
  }
  size_t size = 0;
  WEFT_NVRTC_CHECK(nvrtcGetCUBINSize(program.get(), &size));
  std::vector<char> cubin(size);
  WEFT_NVRTC_CHECK(nvrtcGetCUBIN(program.get(), cubin.data()));
  return cubin;
}

// Loaded libraries and their kernels, for the process (immortal: nothing is unloaded at exit).
struct RtcCache {
  std::mutex mu;  // guards both maps
  std::map<std::tuple<std::string, int>, cudaLibrary_t> libraries;
  std::map<std::tuple<std::string, int, std::string>, cudaKernel_t> kernels;
};

RtcCache& Cache() {
  static RtcCache* const cache = new RtcCache;
  return *cache;
}

cudaLibrary_t LibraryFor(RtcCache& cache, const char* source_name, const char* source, int arch) {
  const auto key = std::make_tuple(std::string(source_name), arch);
  const auto it = cache.libraries.find(key);
  if (it != cache.libraries.end()) return it->second;
  const std::vector<char> cubin = CompileCubin(source_name, source, arch);
  cudaLibrary_t library = nullptr;
  WEFT_CUDA_CHECK(cudaLibraryLoadData(&library, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cache.libraries.emplace(key, library);
  return library;
}

}  // namespace

const void* RtcKernel(const char* source_name, const char* source, const char* kernel, int device) {
  const int arch = ComputeCapability(device);
  RtcCache& cache = Cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  const auto key = std::make_tuple(std::string(source_name), arch, std::string(kernel));
  auto it = cache.kernels.find(key);
  if (it == cache.kernels.end()) {
    cudaKernel_t k = nullptr;
    WEFT_CUDA_CHECK(cudaLibraryGetKernel(&k, LibraryFor(cache, source_name, source, arch), kernel));
    it = cache.kernels.emplace(key, k).first;
  }
  return reinterpret_cast<const void*>(it->second);
}

void LaunchRtc(const void* kernel, int64_t threads, void** args, cudaStream_t stream) {
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (threads + kBlock - 1) / kBlock;
  if (blocks == 0) return;
  WEFT_CHECK_LE(blocks, int64_t{0x7fffffff}) << "kernel launch: too many threads";
  WEFT_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(blocks)), dim3(kBlock), args, 0, stream));
}

}  // namespace weft::gpu
