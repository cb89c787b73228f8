#include "storage/random.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <unordered_map>

#include "core/mutex.h"
#include "core/no_destructor.h"

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
  constexpr uint32_t kM0 = 0xD2511F53, kM1 = 0xCD9E8D57, kW0 = 0x9E3779B9, kW1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key = {key[0] + kW0, key[1] + kW1};
  }
  return ctr;
}

uint32_t PhiloxStream::NextU32() {
  if (used_ == 4) {
    const uint64_t c = key_.offset++;
    block_ = Philox4x32({static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0},
                        {static_cast<uint32_t>(key_.seed), static_cast<uint32_t>(key_.seed >> 32)});
    used_ = 0;
  }
  return block_[used_++];
}

float PhiloxStream::Uniform() { return static_cast<float>(NextU32() >> 8) * (1.0f / 16777216.0f); }

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
