// Reproducible random numbers: a counter-based generator (Philox4x32-10, Salmon et al., SC'11).
// The n-th number of a stream depends only on (seed, stream offset + n), never on which thread
// or worker draws it. An op that needs random numbers reserves a range of the global stream when
// it is pushed (in push order, on the pushing thread), then draws from that range when it runs:
// the same seed gives the same numbers whatever the number of workers. Each device keeps its own
// position in one sequence per seed, so a program gives the same numbers on the CPU and on a GPU.
//
// A range of n numbers takes RandomBlocks(n) whole Philox blocks and starts on a block, and the
// range after it starts at AdvanceRandom(key, n): the one rule by which reservations are laid
// out, here and where a bulk segment of a bound graph cuts one reservation among its ops.
//
//   SeedRandom(42);
//   RandomKey key = ReserveRandom(Device::Cpu(), n);   // at push
//   PhiloxStream s(key);  float u = s.Uniform();       // in the op
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "core/device.h"

namespace weft {

struct RandomKey {
  uint64_t seed = 0;
  uint64_t offset = 0;  // first counter of the reserved range (in blocks of four 32-bit numbers)
  // GPU only: device memory whose value the kernels add to `offset` (a CUDA graph replay's shift
  // from the range it was recorded with to this step's; executor/internal/step_capture.h); null: 0.
  const uint64_t* shift = nullptr;
};

// Philox blocks (four 32-bit numbers each) that a range of `count` numbers takes.
constexpr uint64_t RandomBlocks(uint64_t count) { return (count + 3) / 4; }
// The first key after the range of `count` numbers that starts at `key`.
RandomKey AdvanceRandom(RandomKey key, uint64_t count);

// Sets the seed of every device's stream and restarts it.
void SeedRandom(uint64_t seed);
// Reserves the next `count` 32-bit numbers of `device`'s stream: exactly RandomBlocks(count)
// blocks, so the next reservation starts at AdvanceRandom(key, count). Thread-safe.
RandomKey ReserveRandom(Device device, uint64_t count);
// Reserves consecutive ranges of counts[0], counts[1], ... numbers at once and returns the key of
// the first; range i + 1 starts at AdvanceRandom(key of range i, counts[i]) (a zero count takes
// nothing). Thread-safe.
RandomKey ReserveRandom(Device device, std::span<const uint64_t> counts);

// One Philox4x32-10 block: four 32-bit numbers for a 128-bit counter and 64-bit key.
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

// Draws numbers from a reserved range, in order.
class PhiloxStream {
 public:
  explicit PhiloxStream(RandomKey key) : key_(key) {}
  uint32_t NextU32();
  float Uniform();         // in [0, 1), 24 random bits
  double UniformDouble();  // in [0, 1), 53 random bits
  float Normal();          // standard normal (Box-Muller)

 private:
  RandomKey key_;
  std::array<uint32_t, 4> block_{};
  int used_ = 4;
  bool has_spare_ = false;
  float spare_ = 0;
};

}  // namespace weft
