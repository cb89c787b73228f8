#include "distributed/gpu/nccl_lib.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <vector>

#include "core/error.h"

namespace weft::gpu {
namespace {

std::vector<std::string> Candidates() {
  std::vector<std::string> paths;
  if (const char* lib = std::getenv("WEFT_NCCL_LIB"); lib != nullptr && *lib != '\0') {
    struct stat st {};
    const bool folder = stat(lib, &st) == 0 && S_ISDIR(st.st_mode);
    paths.push_back(folder ? std::string(lib) + "/libnccl.so.2" : std::string(lib));
  }
  paths.push_back("libnccl.so.2");
  const char* cuda = std::getenv("WEFT_CUDA_PATH");
  paths.push_back(std::string(cuda != nullptr && *cuda != '\0' ? cuda : "/usr/local/cuda") +
                  "/lib64/libnccl.so.2");
  return paths;
}

template <typename F>
void Bind(void* lib, const char* name, F* fn, const std::string& path) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  WEFT_CHECK(*fn != nullptr) << "NCCL: " << path << " has no " << name
                             << " (expected NCCL 2.10 or newer)";
}

NcclApi Load() {
  NcclApi api{};
  void* lib = nullptr;
  std::string tried;
  for (const std::string& path : Candidates()) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      api.path = path;
      break;
    }
    tried += "\n  " + path + ": " + dlerror();
  }
  if (lib == nullptr) {
    WEFT_THROW(
        "NCCL: cannot load libnccl.so.2 (set WEFT_NCCL_LIB to the file or its folder; PyTorch's is "
        "site-packages/nvidia/nccl/lib); tried:"
        << tried);
  }
  Bind(lib, "ncclGetVersion", &api.GetVersion, api.path);
  Bind(lib, "ncclGetUniqueId", &api.GetUniqueId, api.path);
  Bind(lib, "ncclCommInitRank", &api.CommInitRank, api.path);
  Bind(lib, "ncclCommDestroy", &api.CommDestroy, api.path);
  Bind(lib, "ncclCommAbort", &api.CommAbort, api.path);
  Bind(lib, "ncclCommGetAsyncError", &api.CommGetAsyncError, api.path);
  Bind(lib, "ncclGetErrorString", &api.GetErrorString, api.path);
  Bind(lib, "ncclAllReduce", &api.AllReduce, api.path);
  Bind(lib, "ncclBroadcast", &api.Broadcast, api.path);
  Bind(lib, "ncclAllGather", &api.AllGather, api.path);
  Bind(lib, "ncclGroupStart", &api.GroupStart, api.path);
  Bind(lib, "ncclGroupEnd", &api.GroupEnd, api.path);
  return api;  // the library stays loaded for the process's life
}

}  // namespace

const NcclApi& Nccl() {
  static const NcclApi api = Load();  // a failed load throws, and the next call tries again
  return api;
}

void NcclCheck(ncclResult_t result, const char* call) {
  if (result == ncclSuccess) return;
  WEFT_THROW(call << ": NCCL error " << static_cast<int>(result) << ": "
                  << Nccl().GetErrorString(result));
}

}  // namespace weft::gpu
