// oneDNN plumbing for the CPU operators: the CPU engine, a stream per thread, memory descriptors
// for weft's dense row-major float32 and bfloat16 tensors, and a process-wide cache of primitives.
//
// Primitives are created with a user-managed scratchpad (ScratchpadAttr): a cached primitive then
// runs on whichever engine worker picks up the op, concurrently with itself, each run using
// scratch from its own worker's workspace. (oneDNN's library-managed scratchpad, in Debian's
// build, ties a primitive to the thread that created it.)
//
//   DnnlPrimitive p = CachedPrimitive(PrimitiveKey("softmax/fwd", x.shape(), axis), [&] {
//     dnnl::softmax_v2_forward::desc d(...);
//     return MakePrimitive<dnnl::softmax_v2_forward>({d, ScratchpadAttr(), DnnlEngine()});
//   });
//   StagedOutputs out(ctx, req, outputs, /*inplace_ok=*/true, {ScratchpadBytes(p)});
//   ExecutePrimitive(p, {{DNNL_ARG_SRC, DnnlMemory(x)}, {DNNL_ARG_DST, DnnlMemory(out.Target(0))}},
//                    out.Extra(0));
#pragma once

#include <cstdint>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor_view.h"
#include "ops/nn/window2d.h"
#include "ops/op.h"
#include "storage/storage.h"

namespace weft::cpu {

// True for float32 (and bfloat16 for an op that passes `bfloat16`: computed with oneDNN), false
// for float64 (oneDNN has no f64 kernels here: the op's loops compute it); any other dtype is a
// weft::Error naming `op`.
bool UseDnnl(DType dtype, const char* op, bool bfloat16 = false);

const dnnl::engine& DnnlEngine();

// A descriptor for a dense row-major tensor of `shape` (any rank oneDNN supports) in `dtype`,
// float32 or bfloat16.
dnnl::memory::desc PlainDesc(const Shape& shape, DType dtype = DType::kFloat32);
// A float32 or bfloat16 memory over the tensor's own buffer, described by PlainDesc.
dnnl::memory DnnlMemory(const TensorView& t);
// oneDNN's name of float32 or bfloat16.
dnnl::memory::data_type DnnlType(DType dtype);

// Images as oneDNN names them, dims (N, C, H, W) in either of weft's layouts (ops/nn/window2d.h):
// `nchw` the extents in that order; channels last, the tensor is (N, H, W, C) (format nhwc).
// float32 or bfloat16.
dnnl::memory::desc ImageDesc(const Shape& nchw, bool channels_last, DType dtype = DType::kFloat32);
// A 4-D tensor of that layout over its own buffer, described by ImageDesc.
dnnl::memory ImageMemory(const TensorView& t, bool channels_last);
// The same for an image of a window op of layout `win`: NHWC, or oneDNN's nChw16c for layout
// NCHW16c where BlockedImage says it lies blocked (and for a 1x1 plane of 16k channels, the same
// bytes as NCHW), else NCHW.
dnnl::memory::desc ImageDesc(const Shape& nchw, const Window2d& win, DType dtype);
dnnl::memory ImageMemory(const TensorView& t, const Window2d& win);
// Whether ImageDesc describes the image as nChw16c.
bool Nchw16c(const Shape& nchw, const Window2d& win);

// Attributes every cached primitive is created with: a user-managed scratchpad.
dnnl::primitive_attr ScratchpadAttr();

// A primitive with the descriptor it was created from (for its scratchpad and workspace sizes)
// and the OpenMP threads it was created for and runs on (0: IntraOpThreads()).
struct DnnlPrimitive {
  dnnl::primitive primitive;
  dnnl::primitive_desc_base desc;
  int threads = 0;
};

// The threads for a oneDNN call of about `work` multiply-adds (a matrix product's M * K * N, a
// normalization's element count times kNormWork): one below kSerialWork, where forking and
// joining an OpenMP team costs more than it saves (5 to 10 us for two threads on these machines;
// oneDNN's matmul of 64 x 128 x 384 takes as long on one thread as on two), else 0
// (IntraOpThreads()). A generation step's one-row products and norms run on one thread.
inline constexpr int64_t kSerialWork = int64_t{1} << 21;
inline constexpr int64_t kNormWork = 64;  // a normalized element against a multiply-add
int DnnlThreadsFor(int64_t work);

template <typename P>
DnnlPrimitive MakePrimitive(const typename P::primitive_desc& pd) {
  return {P(pd), pd};
}

// A cache key: `parts` streamed with separators, after the dtype. Build it from everything else
// the primitive depends on (op, direction, shapes, attributes). The primitives are float32 but
// where a part names another dtype (the bfloat16 ones of FullyConnected, BatchNorm, Convolution).
template <typename... Parts>
std::string PrimitiveKey(const Parts&... parts) {
  std::ostringstream os;
  os << DType::kFloat32 << '|';
  ((os << parts << '|'), ...);
  return os.str();
}

// The primitive cached under `key`, made by `create` on the first call (a miss), for `threads`
// (DnnlThreadsFor; 0: IntraOpThreads()), which ExecutePrimitive then runs it on. Thread-safe.
// A oneDNN error while creating is a weft::Error that names the key.
DnnlPrimitive CachedPrimitive(const std::string& key, const std::function<DnnlPrimitive()>& create,
                              int threads = 0);

struct PrimitiveCacheStats {
  int64_t hits = 0;
  int64_t misses = 0;  // primitives created
  int64_t size = 0;    // primitives held now
};
PrimitiveCacheStats GetPrimitiveCacheStats();
// The keys of the cached primitives oneDNN made with a reference implementation ("ref:" loops,
// no JIT kernel): orders of magnitude slower, where weft asked for layouts it has no kernel for.
std::vector<std::string> ReferencePrimitives();

size_t ScratchpadBytes(const DnnlPrimitive& p);
// The bytes of the workspace (DNNL_ARG_WORKSPACE) a forward-training primitive fills; 0 if none.
size_t WorkspaceBytes(const DnnlPrimitive& p);

using DnnlArgs = std::unordered_map<int, dnnl::memory>;
// Runs `p` on this thread's stream and waits for it; `scratchpad` must hold ScratchpadBytes(p).
// Runs it on the threads it was created for (this thread's OpenMP thread count meanwhile).
void ExecutePrimitive(const DnnlPrimitive& p, DnnlArgs args, void* scratchpad);

// A primitive bound at bind time to the tensors of one call that will not move (a bound graph's
// node, an op's PrepareFn): each run takes only its scratchpad from the call's workspace, with no
// cache lookup and no memory descriptors to make.
class BoundPrimitive {
 public:
  BoundPrimitive(DnnlPrimitive p, DnnlArgs args) : p_(std::move(p)), args_(std::move(args)) {}
  void Run(const OpContext& ctx) const;

 private:
  DnnlPrimitive p_;
  DnnlArgs args_;
};

// Copies `from` into `to` (same dims, any layouts) on this thread's stream, and waits.
void Reorder(const dnnl::memory& from, const dnnl::memory& to);

// Memory in the layout a primitive chose (format_tag::any), for a tensor stored plain. Holds a
// buffer from the CPU pool while the layouts differ.
class LayoutBuffer {
 public:
  LayoutBuffer() = default;
  ~LayoutBuffer();
  LayoutBuffer(const LayoutBuffer&) = delete;
  LayoutBuffer& operator=(const LayoutBuffer&) = delete;
  // The tensor as `want`: its own memory when the layouts agree, else a reordered copy.
  dnnl::memory Input(const TensorView& t, const dnnl::memory::desc& want);
  dnnl::memory Input(const dnnl::memory& have, const dnnl::memory::desc& want);
  // Memory for a primitive to write `t` in `want`; call Flush() after it ran.
  dnnl::memory Output(const TensorView& t, const dnnl::memory::desc& want);
  dnnl::memory Output(const dnnl::memory& have, const dnnl::memory::desc& want);
  // Copies an Output written in another layout back into the tensor.
  void Flush();

 private:
  void* Reserve(size_t bytes);
  Block block_;
  dnnl::memory chosen_, plain_;  // set by Output when the layouts differ
};

// `t` in layout `want` for a primitive to read, reordered once per version of its content
// (OpContext::input_versions: a bound graph's weight) and kept, process-wide, until the version
// changes (up to kKeptReorderBytes in all; then the oldest go). Version 0 (unknown): `buffer`
// reorders it for this call only.
inline constexpr size_t kKeptReorderBytes = size_t{1} << 30;
dnnl::memory ReorderedOnce(const TensorView& t, uint64_t version, const dnnl::memory::desc& want,
                           LayoutBuffer& buffer);
// The bytes ReorderedOnce keeps now.
size_t KeptReorderBytes();

}  // namespace weft::cpu
