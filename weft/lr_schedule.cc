#include "weft/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace weft {
namespace {

void CheckRate(const char* what, double value) {
  if (!(value >= 0 && std::isfinite(value))) {
    WEFT_THROW("learning-rate schedule: expected " << what << " >= 0 and finite, found " << value);
  }
}

struct CheckDecay {
  void operator()(const LrSchedule::Constant&) const {}
  void operator()(const LrSchedule::StepDecay& d) const {
    if (d.step_size < 1)
      WEFT_THROW("learning-rate schedule: expected step_size >= 1, found " << d.step_size);
    if (!(d.factor > 0 && d.factor <= 1)) {
      WEFT_THROW("learning-rate schedule: expected a step factor in (0, 1], found " << d.factor);
    }
  }
  void operator()(const LrSchedule::Cosine& d) const {
    if (d.steps < 1)
      WEFT_THROW("learning-rate schedule: expected cosine steps >= 1, found " << d.steps);
    CheckRate("final_lr", d.final_lr);
  }
};

// The decay's rate `u` steps (u >= 1) after the warm-up.
struct DecayRate {
  double base;
  int64_t u;
  double operator()(const LrSchedule::Constant&) const { return base; }
  double operator()(const LrSchedule::StepDecay& d) const {
    return base * std::pow(d.factor, static_cast<double>((u - 1) / d.step_size));
  }
  double operator()(const LrSchedule::Cosine& d) const {
    const double progress =
        static_cast<double>(std::min(u, d.steps)) / static_cast<double>(d.steps);
    return d.final_lr + (base - d.final_lr) * (1 + std::cos(std::numbers::pi * progress)) / 2;
  }
};

}  // namespace

void LrSchedule::Check() const {
  if (warmup_steps < 0)
    WEFT_THROW("learning-rate schedule: expected warmup_steps >= 0, found " << warmup_steps);
  CheckRate("warmup_begin", warmup_begin);
  std::visit(CheckDecay{}, decay);
}

double LrSchedule::Rate(double base, int64_t t) const {
  WEFT_CHECK(t >= 1) << "learning-rate schedule: steps count from 1, found " << t;
  if (t <= warmup_steps) {
    return warmup_begin +
           (base - warmup_begin) * static_cast<double>(t) / static_cast<double>(warmup_steps);
  }
  return std::visit(DecayRate{base, t - warmup_steps}, decay);
}

}  // namespace weft
