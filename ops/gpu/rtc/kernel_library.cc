#include "ops/gpu/rtc/kernel_library.h"

#include "core/env.h"
#include "core/error.h"
#include "core/gpu/cuda_check.h"
#include "core/no_destructor.h"
#include "engine/gpu/launch_batch.h"
#include "ops/gpu/rtc/compile.h"
#include "ops/gpu/rtc/disk_cache.h"
#include "ops/gpu/rtc/embedded.h"

namespace weft::gpu::rtc {
namespace {

// Owns a cudaLibrary_t.
class LoadedLibrary {
 public:
  LoadedLibrary() = default;
  explicit LoadedLibrary(const Cubin& cubin) {
    WEFT_CUDA_CHECK(cudaLibraryLoadData(&library_, cubin.image.data(), nullptr, nullptr, 0, nullptr,
                                        nullptr, 0));
  }
  ~LoadedLibrary() {
    if (library_ == nullptr) return;
    LaunchBatch::ForgetKernels();  // batched launches and cached chains may name this library's
                                   // kernels
    cudaLibraryUnload(library_);
  }
  LoadedLibrary(LoadedLibrary&& other) noexcept
      : library_(std::exchange(other.library_, nullptr)) {}
  LoadedLibrary& operator=(LoadedLibrary&& other) noexcept {
    std::swap(library_, other.library_);
    return *this;
  }

  Kernel GetKernel(const std::string& lowered_name) const {
    cudaKernel_t kernel = nullptr;
    WEFT_CUDA_CHECK(cudaLibraryGetKernel(&kernel, library_, lowered_name.c_str()));
    return Kernel(kernel);
  }

 private:
  cudaLibrary_t library_ = nullptr;
};

// Every embedded file's text, which any compile may #include: part of every cache key.
const std::string& EmbeddedDigest() {
  static const std::string digest = [] {
    uint64_t h = Fnv1a("");
    for (int i = 0; i < kNumEmbeddedFiles; ++i) {
      h = Fnv1a(kEmbeddedFiles[i].text, Fnv1a(kEmbeddedFiles[i].name, h));
    }
    return std::to_string(h);
  }();
  return digest;
}

// Everything a compile depends on, as one string, for the disk cache.
std::string DiskKey(const std::string& source, const std::string& kernel,
                    const std::vector<std::string>& options) {
  std::string key =
      "weft-rtc-1\n" + NvrtcVersion() + "\n" + EmbeddedDigest() + "\n" + kernel + "\n";
  for (const std::string& o : options) key += o + "\n";
  return key + source;
}

}  // namespace

void Kernel::Launch(dim3 grid, dim3 block, std::span<void* const> args, engine::GpuStream& stream,
                    size_t shared_bytes) const {
  stream.Launch(reinterpret_cast<const void*>(handle_), grid, block, args,
                shared_bytes);  // batched
}

// One (source, kernel, options): its CUBIN per architecture and its library per device.
struct KernelLibrary::Entry {
  struct ForArch {
    std::optional<Cubin> cubin;
    std::string error;  // the compile error, when there is no cubin
  };
  Mutex mu;  // held while compiling, so that each compiles once
  std::unordered_map<int, ForArch> by_arch WEFT_GUARDED_BY(mu);
  std::unordered_map<int, LoadedLibrary> libraries WEFT_GUARDED_BY(mu);  // by device
  std::unordered_map<int, Kernel> kernels WEFT_GUARDED_BY(mu);           // by device
};

KernelLibrary::KernelLibrary(std::string disk_cache_dir)
    : disk_cache_dir_(std::move(disk_cache_dir)) {}

KernelLibrary::~KernelLibrary() = default;

KernelLibrary& KernelLibrary::Global() {
  static NoDestructor<KernelLibrary> library(GetEnvString("WEFT_RTC_CACHE", ""));
  return *library;
}

std::shared_ptr<KernelLibrary::Entry> KernelLibrary::FindOrAdd(const KernelRequest& request) {
  std::string key =
      request.source.empty() ? "file:" + request.source_name : "text:" + request.source;
  key += '\0' + request.kernel;
  for (const std::string& o : request.options) key += '\0' + o;
  MutexLock lock(&mu_);
  std::shared_ptr<Entry>& entry = entries_[key];
  if (entry == nullptr) entry = std::make_shared<Entry>();
  return entry;
}

std::optional<Kernel> KernelLibrary::TryGet(const KernelRequest& request, int device,
                                            std::string* error) {
  std::shared_ptr<Entry> entry = FindOrAdd(request);
  MutexLock lock(&entry->mu);
  if (auto it = entry->kernels.find(device); it != entry->kernels.end()) {
    MutexLock stats_lock(&mu_);
    ++stats_.memory_hits;
    return it->second;
  }
  Build(request, device, *entry);
  if (auto it = entry->kernels.find(device); it != entry->kernels.end()) return it->second;
  *error = entry->by_arch[ComputeCapability(device)].error;
  return std::nullopt;
}

Kernel KernelLibrary::Get(const KernelRequest& request, int device) {
  std::string error;
  std::optional<Kernel> kernel = TryGet(request, device, &error);
  if (!kernel) throw Error(error);
  return *kernel;
}

// Fills entry.kernels[device], or entry.by_arch[arch].error.
void KernelLibrary::Build(const KernelRequest& request, int device, Entry& entry) {
  entry.mu.AssertHeld();
  const int arch = ComputeCapability(device);
  Entry::ForArch& for_arch = entry.by_arch[arch];
  if (!for_arch.cubin && for_arch.error.empty()) {
    const std::string& source =
        request.source.empty() ? std::string(EmbeddedSource(request.source_name)) : request.source;
    const std::vector<std::string> options = CompileOptions(arch, request.options);
    const std::string key = DiskKey(source, request.kernel, options);
    Cubin cubin;
    const CacheRead read = disk_cache_dir_.empty() ? CacheRead::kMissing
                                                   : ReadCachedCubin(disk_cache_dir_, key, &cubin);
    if (read == CacheRead::kHit) {
      for_arch.cubin = std::move(cubin);
    } else {
      CompileResult compiled = CompileToCubin(request.source_name, source, request.kernel, options);
      for_arch.cubin = std::move(compiled.cubin);
      if (!for_arch.cubin) {
        for_arch.error = "NVRTC could not compile kernel '" + request.kernel + "' of '" +
                         request.source_name + "' for sm_" + std::to_string(arch) + ":\n" +
                         compiled.log;
      }
    }
    const bool wrote = for_arch.cubin && read != CacheRead::kHit && !disk_cache_dir_.empty() &&
                       WriteCachedCubin(disk_cache_dir_, key, *for_arch.cubin);
    MutexLock lock(&mu_);
    stats_.compiles += read != CacheRead::kHit;
    stats_.disk_hits += read == CacheRead::kHit;
    stats_.disk_rejects += read == CacheRead::kRejected;
    stats_.disk_writes += wrote;
  }
  if (!for_arch.cubin) return;
  DeviceGuard guard(device);
  LoadedLibrary library(*for_arch.cubin);
  const Kernel kernel = library.GetKernel(for_arch.cubin->lowered_name);
  entry.libraries[device] = std::move(library);
  entry.kernels.emplace(device, kernel);
}

KernelLibrary::Stats KernelLibrary::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

std::string_view EmbeddedSource(std::string_view file) {
  for (int i = 0; i < kNumEmbeddedFiles; ++i) {
    if (file == kEmbeddedFiles[i].name) return kEmbeddedFiles[i].text;
  }
  WEFT_THROW("no embedded kernel source '" << file << "' (expected a file of ops/gpu/kernels)");
}

std::vector<std::string> EmbeddedSourceNames() {
  std::vector<std::string> names;
  for (int i = 0; i < kNumEmbeddedFiles; ++i) names.push_back(kEmbeddedFiles[i].name);
  return names;
}

}  // namespace weft::gpu::rtc
