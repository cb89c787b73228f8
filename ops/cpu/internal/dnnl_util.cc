#include "ops/cpu/internal/dnnl_util.h"

#include <omp.h>

#include <deque>
#include <list>
#include <mutex>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/mutex.h"
#include "core/no_destructor.h"
#include "ops/cpu/internal/cpu_util.h"

namespace weft::cpu {

namespace {

// Distinct (op, shapes, attributes) combinations kept; the least recently used goes first.
constexpr size_t kCacheCapacity = 1024;

// The process's primitives. mu_ protects every member. Primitives are created outside the lock
// (creation can take milliseconds and must not stall other workers' hits), so two threads that
// miss on one key may both create it: both count as misses and the first insert is kept.
class PrimitiveCache {
 public:
  DnnlPrimitive Get(const std::string& key, const std::function<DnnlPrimitive()>& create) {
    {
      MutexLock lock(&mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        ++hits_;
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
      ++misses_;
    }
    DnnlPrimitive created = Create(key, create);
    MutexLock lock(&mu_);
    auto [it, inserted] = index_.emplace(key, lru_.end());
    if (!inserted) return it->second->second;
    lru_.emplace_front(key, created);
    it->second = lru_.begin();
    if (std::string_view(created.desc.impl_info_str()).starts_with("ref:"))
      references_.push_back(key);
    if (lru_.size() > kCacheCapacity) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return created;
  }

  PrimitiveCacheStats Stats() {
    MutexLock lock(&mu_);
    return {hits_, misses_, static_cast<int64_t>(lru_.size())};
  }

  std::vector<std::string> References() {
    MutexLock lock(&mu_);
    return references_;
  }

 private:
  static DnnlPrimitive Create(const std::string& key,
                              const std::function<DnnlPrimitive()>& create) {
    try {
      return create();
    } catch (const dnnl::error& e) {
      WEFT_THROW("oneDNN cannot create primitive " << key << ": " << e.what() << " (status "
                                                   << e.status << ")");
    }
  }

  using Lru = std::list<std::pair<std::string, DnnlPrimitive>>;  // most recently used first
  Mutex mu_;
  Lru lru_ WEFT_GUARDED_BY(mu_);
  std::unordered_map<std::string, Lru::iterator> index_ WEFT_GUARDED_BY(mu_);
  int64_t hits_ WEFT_GUARDED_BY(mu_) = 0;
  int64_t misses_ WEFT_GUARDED_BY(mu_) = 0;
  std::vector<std::string> references_ WEFT_GUARDED_BY(mu_);  // ReferencePrimitives
};

// The engine and the cache are never destroyed: ops still queued at exit run during the engine's
// shutdown, which an atexit handler registered before these were constructed performs after
// their destructors would have run.
PrimitiveCache& Cache() {
  static NoDestructor<PrimitiveCache> cache;
  return *cache;
}

dnnl::stream& ThisThreadStream() {
  thread_local dnnl::stream stream(DnnlEngine());
  return stream;
}

}  // namespace

bool UseDnnl(DType dtype, const char* op, bool bfloat16) {
  if (dtype == DType::kFloat32 || (bfloat16 && dtype == DType::kBFloat16)) return true;
  if (dtype == DType::kFloat64) return false;
  WEFT_THROW(op << ": expected float32" << (bfloat16 ? ", bfloat16" : "") << " or float64, found "
                << dtype);
}

dnnl::memory::data_type DnnlType(DType dtype) {
  WEFT_CHECK(dtype == DType::kFloat32 || dtype == DType::kBFloat16)
      << "oneDNN kernels take float32 or bfloat16 here, found " << dtype;
  return dtype == DType::kFloat32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
}

const dnnl::engine& DnnlEngine() {
  static const NoDestructor<dnnl::engine> engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::memory::desc PlainDesc(const Shape& shape, DType dtype) {
  const auto strides = Strides(shape);
  return dnnl::memory::desc(dnnl::memory::dims(shape.dims().begin(), shape.dims().end()),
                            DnnlType(dtype),
                            dnnl::memory::dims(strides.begin(), strides.begin() + shape.ndim()));
}

dnnl::memory DnnlMemory(const TensorView& t) {
  return dnnl::memory(PlainDesc(t.shape(), t.dtype()), DnnlEngine(), t.raw());
}

dnnl::memory::desc ImageDesc(const Shape& nchw, bool channels_last, DType dtype) {
  if (!channels_last) return PlainDesc(nchw, dtype);
  return dnnl::memory::desc(dnnl::memory::dims(nchw.dims().begin(), nchw.dims().end()),
                            DnnlType(dtype), dnnl::memory::format_tag::nhwc);
}

dnnl::memory ImageMemory(const TensorView& t, bool channels_last) {
  if (!channels_last) return DnnlMemory(t);
  const Shape& s = t.shape();  // (N, H, W, C)
  WEFT_CHECK(s.ndim() == 4) << "oneDNN images are 4-D here, found " << s;
  return dnnl::memory(ImageDesc(Shape{s[0], s[3], s[1], s[2]}, true, t.dtype()), DnnlEngine(),
                      t.raw());
}

// Layout NCHW16c's images as nChw16c: the BlockedImage ones, and those of one position a plane
// whose channels are a multiple of 16 (the same bytes as NCHW: oneDNN's kernels want src and dst
// of one format).
bool Nchw16c(const Shape& nchw, const Window2d& win) {
  return win.blocked && nchw.ndim() == 4 && nchw[1] % 16 == 0;
}

dnnl::memory::desc ImageDesc(const Shape& nchw, const Window2d& win, DType dtype) {
  if (!Nchw16c(nchw, win)) return ImageDesc(nchw, win.channels_last, dtype);
  return dnnl::memory::desc(dnnl::memory::dims(nchw.dims().begin(), nchw.dims().end()),
                            DnnlType(dtype), dnnl::memory::format_tag::nChw16c);
}

dnnl::memory ImageMemory(const TensorView& t, const Window2d& win) {
  if (!Nchw16c(t.shape(), win)) return ImageMemory(t, win.channels_last);
  return dnnl::memory(ImageDesc(t.shape(), win, t.dtype()), DnnlEngine(), t.raw());
}

dnnl::primitive_attr ScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

int DnnlThreadsFor(int64_t work) { return work < kSerialWork ? 1 : 0; }

namespace {

// This thread's OpenMP thread count (which oneDNN's runtime reads) at `threads` (0:
// IntraOpThreads()) for the scope.
class OmpThreadsScope {
 public:
  explicit OmpThreadsScope(int threads) {
    ConfigureOpenMPForThisThread();
    const int want = threads > 0 ? threads : IntraOpThreads();
    if (want != IntraOpThreads()) omp_set_num_threads(want), changed_ = true;
  }
  ~OmpThreadsScope() {
    if (changed_) omp_set_num_threads(IntraOpThreads());
  }
  OmpThreadsScope(const OmpThreadsScope&) = delete;
  OmpThreadsScope& operator=(const OmpThreadsScope&) = delete;

 private:
  bool changed_ = false;
};

}  // namespace

DnnlPrimitive CachedPrimitive(const std::string& key, const std::function<DnnlPrimitive()>& create,
                              int threads) {
  const int resolved = threads > 0 ? threads : IntraOpThreads();
  return Cache().Get(key + "t" + std::to_string(resolved) + '|', [&] {
    OmpThreadsScope scope(resolved);
    DnnlPrimitive p = create();
    p.threads = resolved;
    return p;
  });
}

PrimitiveCacheStats GetPrimitiveCacheStats() { return Cache().Stats(); }

std::vector<std::string> ReferencePrimitives() { return Cache().References(); }

size_t ScratchpadBytes(const DnnlPrimitive& p) { return p.desc.scratchpad_desc().get_size(); }

size_t WorkspaceBytes(const DnnlPrimitive& p) { return p.desc.workspace_desc().get_size(); }

void ExecutePrimitive(const DnnlPrimitive& p, DnnlArgs args, void* scratchpad) {
  OmpThreadsScope scope(p.threads);
  const dnnl::memory::desc pad = p.desc.scratchpad_desc();
  if (pad.get_size() > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(pad, DnnlEngine(), scratchpad));
  try {
    dnnl::stream& stream = ThisThreadStream();
    p.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& e) {
    WEFT_THROW("oneDNN primitive " << p.desc.impl_info_str() << " failed: " << e.what()
                                   << " (status " << e.status << ")");
  }
}

void BoundPrimitive::Run(const OpContext& ctx) const {
  const size_t bytes = ScratchpadBytes(p_);
  ExecutePrimitive(p_, args_, bytes > 0 ? ctx.Workspace(bytes) : nullptr);
}

void Reorder(const dnnl::memory& from, const dnnl::memory& to) {
  ConfigureOpenMPForThisThread();
  dnnl::stream& stream = ThisThreadStream();
  dnnl::reorder(from, to).execute(stream, const_cast<dnnl::memory&>(from),
                                  const_cast<dnnl::memory&>(to));
  stream.wait();
}

LayoutBuffer::~LayoutBuffer() { Storage::Get(Device::Cpu())->Free(block_); }

void* LayoutBuffer::Reserve(size_t bytes) {
  WEFT_CHECK(block_.ptr == nullptr) << "LayoutBuffer: one tensor per buffer";
  block_ = Storage::Get(Device::Cpu())->Alloc(bytes);
  return block_.ptr;
}

dnnl::memory LayoutBuffer::Input(const TensorView& t, const dnnl::memory::desc& want) {
  return Input(DnnlMemory(t), want);
}

dnnl::memory LayoutBuffer::Input(const dnnl::memory& have, const dnnl::memory::desc& want) {
  if (want == have.get_desc()) return have;
  dnnl::memory chosen(want, DnnlEngine(), Reserve(want.get_size()));
  Reorder(have, chosen);
  return chosen;
}

dnnl::memory LayoutBuffer::Output(const TensorView& t, const dnnl::memory::desc& want) {
  return Output(DnnlMemory(t), want);
}

dnnl::memory LayoutBuffer::Output(const dnnl::memory& have, const dnnl::memory::desc& want) {
  if (want == have.get_desc()) return have;
  chosen_ = dnnl::memory(want, DnnlEngine(), Reserve(want.get_size()));
  plain_ = have;
  return chosen_;
}

void LayoutBuffer::Flush() {
  if (chosen_) Reorder(chosen_, plain_);
}

namespace {

// A reordered tensor, by its buffer and layout; the version of the content it holds.
struct KeptReorder {
  const void* source;
  dnnl::memory::desc layout;
  uint64_t version;
  dnnl::memory reordered;
};

struct KeptReorders {
  Mutex mu;
  std::deque<KeptReorder> kept WEFT_GUARDED_BY(mu);  // oldest first
  size_t bytes WEFT_GUARDED_BY(mu) = 0;
};

KeptReorders& Kept() {
  static NoDestructor<KeptReorders> k;  // ops may run at exit
  return *k;
}

}  // namespace

size_t KeptReorderBytes() {
  KeptReorders& k = Kept();
  MutexLock lock(&k.mu);
  return k.bytes;
}

dnnl::memory ReorderedOnce(const TensorView& t, uint64_t version, const dnnl::memory::desc& want,
                           LayoutBuffer& buffer) {
  if (version == 0) return buffer.Input(t, want);
  const dnnl::memory plain = DnnlMemory(t);
  if (want == plain.get_desc()) return plain;
  KeptReorders& k = Kept();
  {
    MutexLock lock(&k.mu);
    for (const KeptReorder& r : k.kept) {
      if (r.source == t.raw() && r.version == version && r.layout == want) return r.reordered;
    }
  }
  dnnl::memory reordered(want, DnnlEngine());  // oneDNN's own allocation, freed with the handle
  Reorder(plain, reordered);
  MutexLock lock(&k.mu);
  for (auto it = k.kept.begin(); it != k.kept.end();) {  // older versions of this tensor
    if (it->source == t.raw() && it->layout == want) {
      k.bytes -= it->layout.get_size();
      it = k.kept.erase(it);
    } else {
      ++it;
    }
  }
  k.kept.push_back({t.raw(), want, version, reordered});
  k.bytes += want.get_size();
  while (k.bytes > kKeptReorderBytes && k.kept.size() > 1) {
    k.bytes -= k.kept.front().layout.get_size();
    k.kept.pop_front();
  }
  return reordered;
}

}  // namespace weft::cpu
