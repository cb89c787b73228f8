#include "storage/random.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <unordered_map>

#include "core/mutex.h"
#include "core/no_destructor.h"
#include "core/philox.h"

namespace weft {

namespace {

struct Streams {
  Mutex mu;
  uint64_t seed WEFT_GUARDED_BY(mu) = 0x5eed;
  std::unordered_map<Device, uint64_t> next_offset WEFT_GUARDED_BY(mu);
};

Streams& GetStreams() {
  static NoDestructor<Streams> streams;  // ops may draw at exit
  return *streams;
}

}  // namespace

void SeedRandom(uint64_t seed) {
  Streams& s = GetStreams();
  MutexLock lock(&s.mu);
  s.seed = seed;
  s.next_offset.clear();
}

RandomKey AdvanceRandom(RandomKey key, uint64_t count) {
  key.offset += RandomBlocks(count);
  return key;
}

RandomKey ReserveRandom(Device device, uint64_t count) {
  return ReserveRandom(device, std::span(&count, 1));
}

RandomKey ReserveRandom(Device device, std::span<const uint64_t> counts) {
  Streams& s = GetStreams();
  MutexLock lock(&s.mu);
  uint64_t& next = s.next_offset[device];
  // The key is the seed alone: each device has its own position in the same sequence, so the
  // same program gives the same numbers on the CPU and on a GPU.
  const RandomKey first{s.seed, next};
  RandomKey end = first;
  for (uint64_t count : counts) end = AdvanceRandom(end, count);
  next = end.offset;
  return first;
}

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> ctr, std::array<uint32_t, 2> key) {
  const PhiloxBlock b = Philox4x32(PhiloxBlock{{ctr[0], ctr[1], ctr[2], ctr[3]}}, key[0], key[1]);
  return {b.v[0], b.v[1], b.v[2], b.v[3]};
}

uint32_t PhiloxStream::NextU32() {
  if (used_ == 4) {
    const PhiloxBlock b = PhiloxBlockAt(key_.seed, key_.offset++);
    block_ = {b.v[0], b.v[1], b.v[2], b.v[3]};
    used_ = 0;
  }
  return block_[used_++];
}

float PhiloxStream::Uniform() { return PhiloxUniform(NextU32()); }

double PhiloxStream::UniformDouble() {
  const uint64_t hi = NextU32() >> 5, lo = NextU32() >> 6;
  return static_cast<double>(hi * 67108864 + lo) * (1.0 / 9007199254740992.0);
}

float PhiloxStream::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const float u1 = 1.0f - Uniform();  // (0, 1]
  const float u2 = Uniform();
  const float r = std::sqrt(-2.0f * std::log(u1));
  spare_ = r * std::sin(6.2831853f * u2);
  has_spare_ = true;
  return r * std::cos(6.2831853f * u2);
}

}  // namespace weft
