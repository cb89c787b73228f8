// NVRTC: CUDA C++ source to a CUBIN for one GPU architecture. Internal to the kernel library.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace weft::gpu::rtc {

// A compiled kernel: the CUBIN image and the kernel's mangled name in it.
struct Cubin {
  std::string lowered_name;
  std::string image;
};

struct CompileResult {
  std::optional<Cubin> cubin;  // empty when compilation failed
  std::string log;             // NVRTC's log (warnings too); on failure, what went wrong
};

// Every NVRTC option used for `arch` (major * 10 + minor), weft's own first, then `extra`.
// These are exactly what the disk cache keys on.
std::vector<std::string> CompileOptions(int arch, const std::vector<std::string>& extra);

// Compiles `source` (named `label` in messages) with every embedded file available to #include,
// and returns the CUBIN holding name expression `kernel`.
CompileResult CompileToCubin(const std::string& label, const std::string& source,
                             const std::string& kernel, const std::vector<std::string>& options);

// "<major>.<minor>" of the NVRTC library this process loaded.
std::string NvrtcVersion();

}  // namespace weft::gpu::rtc
