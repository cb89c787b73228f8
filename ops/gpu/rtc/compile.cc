#include "ops/gpu/rtc/compile.h"

#include <nvrtc.h>

#include "core/error.h"
#include "ops/gpu/rtc/embedded.h"

namespace weft::gpu::rtc {
namespace {

// Owns an nvrtcProgram.
class Program {
 public:
  Program(const std::string& label, const std::string& source) {
    std::vector<const char*> names, texts;
    for (int i = 0; i < kNumEmbeddedFiles; ++i) {
      names.push_back(kEmbeddedFiles[i].name);
      texts.push_back(kEmbeddedFiles[i].text);
    }
    Check(nvrtcCreateProgram(&program_, source.c_str(), label.c_str(), kNumEmbeddedFiles,
                             texts.data(), names.data()),
          "nvrtcCreateProgram");
  }
  ~Program() { nvrtcDestroyProgram(&program_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  nvrtcProgram get() const { return program_; }

  std::string Log() const {
    size_t size = 0;
    if (nvrtcGetProgramLogSize(program_, &size) != NVRTC_SUCCESS || size == 0) return "";
    std::string log(size, '\0');
    if (nvrtcGetProgramLog(program_, log.data()) != NVRTC_SUCCESS) return "";
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
  }

  static void Check(nvrtcResult result, const char* call) {
    if (result != NVRTC_SUCCESS)
      WEFT_THROW("NVRTC error: " << call << ": " << nvrtcGetErrorString(result));
  }

 private:
  nvrtcProgram program_ = nullptr;
};

Cubin ReadCubin(const Program& program, const std::string& kernel) {
  Cubin cubin;
  const char* lowered = nullptr;
  Program::Check(nvrtcGetLoweredName(program.get(), kernel.c_str(), &lowered),
                 "nvrtcGetLoweredName");
  cubin.lowered_name = lowered;
  size_t size = 0;
  Program::Check(nvrtcGetCUBINSize(program.get(), &size), "nvrtcGetCUBINSize");
  cubin.image.resize(size);
  Program::Check(nvrtcGetCUBIN(program.get(), cubin.image.data()), "nvrtcGetCUBIN");
  return cubin;
}

}  // namespace

std::vector<std::string> CompileOptions(int arch, const std::vector<std::string>& extra) {
  // No FMA contraction: a * b + c rounds twice, as on the CPU, so that GPU results match the
  // CPU's bit for bit wherever the math library is not involved (these kernels are bound by
  // memory bandwidth: the fused form would not make them faster). -default-device: kernel
  // sources hold device code only, so lambdas and helpers need no __device__.
  std::vector<std::string> options = {"--gpu-architecture=sm_" + std::to_string(arch), "-std=c++17",
                                      "--fmad=false", "-default-device"};
  options.insert(options.end(), extra.begin(), extra.end());
  return options;
}

CompileResult CompileToCubin(const std::string& label, const std::string& source,
                             const std::string& kernel, const std::vector<std::string>& options) {
  CompileResult result;
  try {
    Program program(label, source);
    Program::Check(nvrtcAddNameExpression(program.get(), kernel.c_str()), "nvrtcAddNameExpression");
    std::vector<const char*> argv;
    for (const std::string& o : options) argv.push_back(o.c_str());
    const nvrtcResult compiled =
        nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());
    result.log = program.Log();
    if (compiled != NVRTC_SUCCESS) return result;
    result.cubin = ReadCubin(program, kernel);
  } catch (const Error& e) {  // an NVRTC call other than the compile failed: report it the same way
    result.cubin.reset();
    result.log = result.log.empty() ? e.what() : result.log + "\n" + e.what();
  }
  return result;
}

std::string NvrtcVersion() {
  int major = 0, minor = 0;
  nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

}  // namespace weft::gpu::rtc
