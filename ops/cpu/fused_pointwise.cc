// CPU compute of _fused_pointwise (ops/fusion/fused_group.h): the group's steps run over tiles of
// its iteration space, each step through its op's own CPU compute on one tile before the next tile
// is loaded. A tile of every value between steps stays in L1, so a chain of k pointwise ops reads
// its inputs and writes its outputs in main memory once instead of k times, and computes exactly
// what the unfused ops compute (the same code on the same elements: bit for bit). Tiles run in
// parallel with the op's thread budget: each thread takes batches of consecutive tiles from a
// shared counter, so a thread that loses its core to other work (a shared machine) leaves its
// remaining batches to the others instead of making them wait at the end. Broadcast inputs are
// gathered into a tile of their own for each binary step that reads them. A run of unary and binary
// steps on float32, each reading the one before (the benchmark's chain, its backward; a bias add
// and its GELU; a dropout's mask and the residual add), runs as a lane chain instead
// (ops/cpu/internal/lane_chain.h): 64 elements at a time through every functor of the run in
// vector registers, reading a broadcast operand from its gathered tile, the same functors on the
// same elements, so the same bits. Kept because
// fusion_bench's chain runs faster with them, inference and training step alike
// (`bazel run --config=opt //bench:fusion_bench -- --pass=0 --mlp=0 --peer=0 --reps=20`, chains on
// and off; bench/README.md has the figures).
//
// Outputs too large to stay in cache (StreamBytes: the last-level cache's size, at least 8 MiB) and
// written, not added to, are computed into a tile of their own and then stored with non-temporal
// (streaming) stores, on x86-64: a plain store first reads each line it misses (a read for
// ownership), a third of the memory traffic of a chain that reads x and writes y; a lane chain that
// computes such an output stores it so itself, straight from its registers, with no staging tile.
// An output the L3 holds is stored plainly: streaming it sends it to main memory past a cache that
// would have kept it for its reader (at a fixed 8 MiB, the bias + GELU groups of fusion_bench's
// block rows spent a quarter of their time in the streaming stores on the 533 MB L3 of the
// development machine, and ran 10-20% slower than with plain stores: `fusion_bench --pass=0
// --chain=0 --mlp=0 --peer=0 --threads=1`, the two builds in turns). While a tile's steps run, the
// inputs of the thread's next tile are prefetched (NextTilePrefetch), so that main memory and the
// steps overlap; kept because fusion_bench's chain runs faster with it (the first command, with and
// without).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/shape.h"
#include "core/small_vector.h"
#include "ops/cpu/internal/cpu_util.h"
#include "ops/cpu/internal/lane_chain.h"
#include "ops/fusion/fused_group.h"
#include "ops/fusion/internal/step_plan.h"
#include "ops/op.h"

#if defined(__SSE2__)
#include <immintrin.h>
#endif

namespace weft::cpu {
namespace {

constexpr int64_t kTileBudgetBytes =
    24 << 10;  // one tile of every slot, gathered input and staged output: in L1
constexpr int64_t kMaxTile = 4096;  // elements; the ops' own ParallelFor grain: inline
constexpr int64_t kMinTile = 256;
constexpr int64_t kBatchElements =
    1 << 16;  // the tiles a thread takes at once: 256 KiB of float32 per value
// Outputs of at least this many bytes are stored streaming: more than the last-level cache holds
// (as sysconf reports it; at least 8 MiB, far more than a core's L2), so the cache would not keep
// them for their readers anyway. WEFT_CPU_STREAM_MIB sets it (read at bind).
int64_t StreamBytes() {
  int64_t llc = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
  const int64_t mib = std::max<int64_t>(llc >> 20, 8);
  return int64_t{GetEnvInt("WEFT_CPU_STREAM_MIB", static_cast<int>(mib), 1)} << 20;
}

// Copies `bytes` from `src` (a tile in cache) to `dst` (main memory) with non-temporal stores
// where the processor has them (the caller fences: StreamFence), else with memcpy.
void StreamCopy(const char* src, char* dst, size_t bytes) {
#if defined(__SSE2__)
  for (; bytes > 0 && reinterpret_cast<uintptr_t>(dst) % 16 != 0; --bytes) *dst++ = *src++;
  for (; bytes >= 16; bytes -= 16, src += 16, dst += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  }
#endif
  std::memcpy(dst, src, bytes);
}

// Orders this thread's streaming stores before its later stores (they are weakly ordered even on
// x86), so that whoever this thread then signals sees them.
void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// Brings the next tile's inputs into cache while the steps of this one run, a share of its lines
// before each step: the hardware prefetcher follows only the loads it sees, so without this the
// first step of every tile would wait for main memory and the others would leave it idle. Spread
// over the steps, not issued at once, so that the prefetches never fill the core's queue of
// outstanding misses ahead of the steps' own loads.
class NextTilePrefetch {
 public:
  void Clear() { ranges_.clear(); }
  void Add(const void* begin, size_t bytes) {
    ranges_.push_back({static_cast<const char*>(begin), bytes});
  }

  // Share `index` of `count` of the lines.
  void Share(int index, int count) const {
    for (const auto& [begin, bytes] : ranges_) {
      const size_t lines = (bytes + kLine - 1) / kLine;
      for (size_t l = lines * index / count; l < lines * (index + 1) / count; ++l)
        Prefetch(begin + l * kLine);
    }
  }

 private:
  static constexpr size_t kLine = 64;
  static void Prefetch(const char* p) {
#if defined(__SSE2__)
    _mm_prefetch(p, _MM_HINT_T0);
#else
    __builtin_prefetch(p);
#endif
  }

  std::vector<std::pair<const char*, size_t>> ranges_;
};

// The elements of a broadcast input that positions [begin, begin + n) of its reader's output
// (row-major, shape `out`) read: stride 0 along the axes it is broadcast along. Copied a run of
// the innermost axis at a time: one memcpy where the input moves along it (a bias of (C,) against
// (R, C): rows of C), one value repeated where it does not ((R, 1) against (R, C)). Element by
// element, with a call per element, a bias + GELU group spent more time gathering than computing
// (`fusion_bench -- --pass=0 --chain=0 --mlp=0 --threads=1`, its block rows; bench/README.md).
class BroadcastGather {
 public:
  BroadcastGather(const Shape& in, const Shape& out, DType dtype)
      : esize_(DTypeSize(dtype)), ndim_(out.ndim()), stride_(BroadcastStrides(in, out)) {
    for (int d = 0; d < ndim_; ++d) extent_[d] = out[d];
  }

  void Gather(const void* src, int64_t begin, int64_t n, void* dst) const {
    if (ndim_ == 0) return Repeat(src, n, dst);
    int64_t idx[Shape::kMaxDims] = {};
    int64_t offset = 0;
    for (int d = ndim_ - 1; d >= 0; --d) {
      idx[d] = begin % extent_[d];
      begin /= extent_[d];
      offset += idx[d] * stride_[d];
    }
    const char* from = static_cast<const char*>(src);
    char* to = static_cast<char*>(dst);
    const int last = ndim_ - 1;
    while (n > 0) {
      const int64_t run = std::min(n, extent_[last] - idx[last]);
      if (stride_[last] != 0) {
        std::memcpy(to, from + offset * esize_, run * esize_);
      } else {
        Repeat(from + offset * esize_, run, to);
      }
      to += run * esize_;
      n -= run;
      offset -= idx[last] * stride_[last];  // back to the run's row, then the next position
      idx[last] = 0;
      for (int d = last - 1; d >= 0; --d) {
        offset += stride_[d];
        if (++idx[d] < extent_[d]) break;
        offset -= stride_[d] * extent_[d];
        idx[d] = 0;
      }
    }
  }

 private:
  // `n` copies of the element at `src`.
  void Repeat(const void* src, int64_t n, void* dst) const {
    switch (esize_) {
      case 2:
        return Fill<uint16_t>(src, n, dst);
      case 4:
        return Fill<uint32_t>(src, n, dst);
      case 8:
        return Fill<uint64_t>(src, n, dst);
    }
    for (int64_t j = 0; j < n; ++j) std::memcpy(static_cast<char*>(dst) + j * esize_, src, esize_);
  }
  template <typename Bits>
  static void Fill(const void* src, int64_t n, void* dst) {
    Bits v;
    std::memcpy(&v, src, sizeof v);
    std::fill_n(static_cast<Bits*>(dst), n, v);
  }

  size_t esize_;
  int ndim_;
  std::array<int64_t, Shape::kMaxDims> stride_;
  int64_t extent_[Shape::kMaxDims] = {};
};

class FusedCpu {
 public:
  FusedCpu(std::shared_ptr<const FusedGroup> group, std::span<const OpReq> req)
      : group_(std::move(group)), plan_(*group_, Device::Cpu(), req) {
    const FusedGroup& g = *group_;
    size_t max_esize = 1;
    for (DType t : g.dtypes) max_esize = std::max(max_esize, DTypeSize(t));
    slot_bytes_per_element_ = max_esize;
    for (const StepPlan::BroadcastUse& u : plan_.broadcast_uses()) {
      const FusedGroup::Step& step = g.steps[u.step];
      gathers_.emplace_back(g.shapes[u.input], g.shapes[step.first_output], g.dtypes[u.input]);
    }
    chains_ = PlanLaneChains(g, plan_);
    const int64_t stream_bytes = StreamBytes();
    for (size_t k = 0; k < req.size(); ++k) {
      const bool stream =
          Writes(req[k]) &&
          g.size * static_cast<int64_t>(DTypeSize(g.dtypes[g.outputs[k]])) >= stream_bytes;
      staged_.push_back(stream && !StreamFromChain(g.outputs[k]));
    }
    num_staged_ = std::count(staged_.begin(), staged_.end(), true);
    const size_t per_element = (plan_.num_slots() + gathers_.size() + num_staged_) * max_esize;
    tile_ = per_element == 0 ? kMaxTile : kTileBudgetBytes / static_cast<int64_t>(per_element);
    tile_ = std::clamp<int64_t>(tile_ / 64 * 64, kMinTile, kMaxTile);
    input_kind_ = g.InputKinds();
    IndexItems();
  }

  // ParallelFor gives each thread a range of batches only to start it: the threads then take the
  // batches from `next` (relaxed: it only hands each batch out once; the parallel loop's end
  // orders every tile's stores before the caller goes on).
  void Run(const OpContext& ctx, std::span<const TensorView> in,
           std::span<const TensorView> out) const {
    const int64_t tiles = (group_->size + tile_ - 1) / tile_;
    const int64_t tiles_per_batch = std::max<int64_t>(1, kBatchElements / tile_);
    const int64_t batches = (tiles + tiles_per_batch - 1) / tiles_per_batch;
    std::atomic<int64_t> next{0};
    ParallelFor(batches, 1, [&](int64_t, int64_t) {
      ThreadScratch scratch = NewScratch(out.size());
      for (int64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < batches;) {
        const int64_t end = std::min(tiles, (b + 1) * tiles_per_batch);
        for (int64_t t = b * tiles_per_batch; t < end; ++t) {
          const Tile tile{t * tile_, std::min(tile_, group_->size - t * tile_)};
          PrefetchNext(in, t + 1 < end ? tile.begin + tile.n : group_->size, scratch.prefetch);
          RunTile(ctx, in, out, tile, scratch);
        }
      }
      StreamFence();
    });
  }

 private:
  // Elements [begin, begin + n) of the iteration space.
  struct Tile {
    int64_t begin, n;
  };

  // What one thread reuses from tile to tile: the memory of the tile's slots, gathered inputs and
  // staged outputs, in that order; the views of every value, output and broadcast use; and the
  // prefetch of its next tile.
  struct ThreadScratch {
    std::vector<double> memory;
    std::vector<TensorView> values, outs, gathered;
    NextTilePrefetch prefetch;
  };

  ThreadScratch NewScratch(size_t num_outputs) const {
    const size_t uses = plan_.broadcast_uses().size();
    ThreadScratch s;
    s.memory.resize(
        ((plan_.num_slots() + uses + num_staged_) * slot_bytes_per_element_ * tile_ + 7) / 8);
    s.values.resize(group_->num_values());
    s.outs.resize(num_outputs);
    s.gathered.resize(uses);
    return s;
  }

  // Whether a lane chain stores `value`, an output the plan writes in place (kOutput): if so, the
  // chain's step streams it straight into the output, instead of the output being staged.
  bool StreamFromChain(uint32_t value) {
    if (plan_.home(value) != StepPlan::Home::kOutput) return false;
    for (LaneChain& chain : chains_) {
      for (LaneStep& step : chain.steps) {
        if (step.store < 0 || chain.dsts[step.store] != value || step.add) continue;
        step.stream = true;
        return true;
      }
    }
    return false;
  }

  // The tile's work in order (items_), and the prefetch each item shares (prefetched_,
  // num_shares_).
  void IndexItems() {
    const FusedGroup& g = *group_;
    prefetched_.assign(g.num_inputs, true);
    for (const LaneChain& chain : chains_) {
      for (uint32_t v : chain.streamed) prefetched_[v] = false;
    }
    for (size_t c = 0, s = 0; s < g.steps.size();) {
      const bool chain = c < chains_.size() && chains_[c].first == s;
      const bool shares = !chain && plan_.runs(s);
      items_.push_back({chain ? static_cast<int>(c) : -1, static_cast<uint32_t>(s),
                        shares ? num_shares_++ : -1});
      s = chain ? chains_[c++].end : s + 1;
    }
  }

  // Points `prefetch` at the tile that starts at element `begin` of every input read in full that
  // no lane chain streams.
  void PrefetchNext(std::span<const TensorView> in, int64_t begin,
                    NextTilePrefetch& prefetch) const {
    prefetch.Clear();
    const int64_t n = std::min(tile_, group_->size - begin);
    for (uint32_t i = 0; n > 0 && i < group_->num_inputs; ++i) {
      if (input_kind_[i] != FusedGroup::InputKind::kFull || !prefetched_[i]) continue;
      const size_t esize = DTypeSize(in[i].dtype());
      prefetch.Add(static_cast<const char*>(in[i].raw()) + begin * esize, n * esize);
    }
  }

  static TensorView Slice(const TensorView& t, int64_t begin, const Shape& tile) {
    return TensorView(static_cast<char*>(t.raw()) + begin * DTypeSize(t.dtype()), tile, t.dtype(),
                      t.device());
  }

  // A lane chain over the tile; it prefetches its streamed inputs itself, block by block. Its
  // broadcast operands are read from their gathered tiles.
  void RunChain(const LaneChain& chain, const ThreadScratch& s, int64_t n) const {
    SmallVector<const float*, 8> others, ahead;
    SmallVector<float*, 8> dsts;
    for (size_t k = 0; k < chain.others.size(); ++k) {
      const int use = chain.gathered[k];
      const TensorView& t = use >= 0 ? s.gathered[use] : s.values[chain.others[k]];
      others.push_back(static_cast<const float*>(t.raw()));
    }
    for (uint32_t v : chain.dsts) dsts.push_back(static_cast<float*>(s.values[v].raw()));
    for (uint32_t v : chain.streamed) ahead.push_back(static_cast<const float*>(s.values[v].raw()));
    const float* src = chain.src == LaneChain::kNoSrc
                           ? nullptr
                           : static_cast<const float*>(s.values[chain.src].raw());
    RunLaneChain(chain.steps, src, others.data(), dsts.data(), ahead.span(), 0, n);
  }

  // Points the views of `s` at the tile: inputs read in full and outputs at their slices (staged
  // outputs at their memory), values at their slots, broadcast uses at their gathered copies.
  void BindTile(std::span<const TensorView> in, std::span<const TensorView> out, Tile tile,
                ThreadScratch& s) const {
    const FusedGroup& g = *group_;
    const size_t slot_bytes = slot_bytes_per_element_ * tile_;
    const Shape shape{tile.n};  // built once: a Shape's constructor checks each extent
    char* memory = reinterpret_cast<char*>(s.memory.data());
    for (uint32_t i = 0; i < g.num_inputs; ++i) {
      s.values[i] =
          input_kind_[i] == FusedGroup::InputKind::kFull ? Slice(in[i], tile.begin, shape) : in[i];
    }
    for (uint32_t v = g.num_inputs; v < g.num_values(); ++v) {
      const int slot = plan_.slot(v);
      void* data = slot >= 0 ? memory + slot * slot_bytes : nullptr;
      s.values[v] = TensorView(data, shape, g.dtypes[v], Device::Cpu());
    }
    char* next = memory + plan_.num_slots() * slot_bytes;
    for (size_t u = 0; u < s.gathered.size(); ++u, next += slot_bytes) {
      const uint32_t input = plan_.broadcast_uses()[u].input;
      gathers_[u].Gather(in[input].raw(), tile.begin, tile.n, next);
      s.gathered[u] = TensorView(next, shape, g.dtypes[input], Device::Cpu());
    }
    for (size_t k = 0; k < out.size(); ++k) {
      s.outs[k] = staged_[k] ? TensorView(next, shape, out[k].dtype(), Device::Cpu())
                             : Slice(out[k], tile.begin, shape);
      if (staged_[k]) next += slot_bytes;
    }
  }

  void RunTile(const OpContext& ctx, std::span<const TensorView> in,
               std::span<const TensorView> out, Tile tile, ThreadScratch& s) const {
    BindTile(in, out, tile, s);
    plan_.Begin(s.values, s.outs);
    for (const Item& item : items_) {
      if (item.chain >= 0) {
        RunChain(chains_[item.chain], s, tile.n);
        continue;
      }
      if (item.share >= 0) s.prefetch.Share(item.share, num_shares_);
      plan_.RunStep(ctx, item.step, StepPlan::Layout::kTiles, s.values, s.gathered);
    }
    plan_.End(ctx, s.values, s.outs);
    for (size_t k = 0; k < out.size(); ++k) {
      if (!staged_[k]) continue;
      const size_t esize = DTypeSize(out[k].dtype());
      StreamCopy(static_cast<const char*>(s.outs[k].raw()),
                 static_cast<char*>(out[k].raw()) + tile.begin * esize, tile.n * esize);
    }
  }

  // A piece of a tile's work: a lane chain (chain >= 0: its steps) or one step through its op,
  // with the share of the next tile's prefetch issued before it (-1: none; the step does not run).
  struct Item {
    int chain;
    uint32_t step;
    int share;
  };

  std::shared_ptr<const FusedGroup> group_;
  StepPlan plan_;
  std::vector<LaneChain> chains_;
  std::vector<Item> items_;
  std::vector<bool>
      prefetched_;  // per input: by NextTilePrefetch (else a chain streams it or it is not full)
  int num_shares_ = 0;                    // of a tile's prefetch: one per step item that runs
  std::vector<BroadcastGather> gathers_;  // per broadcast use
  std::vector<FusedGroup::InputKind> input_kind_;
  std::vector<bool> staged_;  // per output: computed into a tile of its own, then StreamCopy'd
  size_t num_staged_ = 0;
  size_t slot_bytes_per_element_ = 1;
  int64_t tile_ = kMaxTile;  // elements
};

// Bind time: the plan, once for the node's requests.
ComputeFn PrepareFused(const Attrs& attrs, Device, std::span<const TensorView>,
                       std::span<const OpReq> req, std::span<const TensorView>) {
  auto fused = std::make_shared<const FusedCpu>(attrs.Get<FusedParam>().group, req);
  return [fused](const OpContext& ctx, const Attrs&, std::span<const TensorView> in,
                 std::span<const OpReq>,
                 std::span<const TensorView> out) { fused->Run(ctx, in, out); };
}

void FusedCompute(const OpContext& ctx, const Attrs& attrs, std::span<const TensorView> in,
                  std::span<const OpReq> req, std::span<const TensorView> out) {
  FusedCpu(attrs.Get<FusedParam>().group, req).Run(ctx, in, out);
}

WEFT_REGISTER_DEVICE_IMPLS(DeviceType::kCpu,
                           {{"_fused_pointwise",
                             {.compute = FusedCompute, .prepare = PrepareFused}}});

}  // namespace
}  // namespace weft::cpu
