// Learning-rate schedules: the rate of each training step as a function of the step count, for a
// base rate (the optimizer's). A schedule owns only its settings; weft::Trainer evaluates it on
// the host before each step and writes the result into the bound step's learning-rate array.
//
//   LrSchedule s{.decay = LrSchedule::Cosine{.steps = 900, .final_lr = 1e-4}, .warmup_steps = 100};
//   s.Check();                        // throws weft::Error for bad settings
//   double lr = s.Rate(0.1, 250);     // the rate of the 250th step for base rate 0.1
//
// For the t-th step (t = 1, 2, ...: the count of steps taken, this one included) and base rate
// `base`:
//   warm-up, t <= warmup_steps: warmup_begin + (base - warmup_begin) * t / warmup_steps
//   after it, with u = t - warmup_steps the steps since the warm-up, the decay's rate:
//     Constant:  base
//     StepDecay: base * factor^floor((u - 1) / step_size)   (times factor every step_size steps)
//     Cosine:    final_lr + (base - final_lr) * (1 + cos(pi * min(u, steps) / steps)) / 2
//                (from base down to final_lr over `steps` steps, then final_lr)
#pragma once

#include <cstdint>
#include <variant>

namespace weft {

struct LrSchedule {
  struct Constant {};
  struct StepDecay {
    int64_t step_size = 1;  // >= 1
    double factor = 0.1;    // in (0, 1]
  };
  struct Cosine {
    int64_t steps = 1;    // >= 1
    double final_lr = 0;  // >= 0
  };

  std::variant<Constant, StepDecay, Cosine> decay;
  int64_t warmup_steps = 0;  // >= 0; 0: no warm-up
  double warmup_begin = 0;   // >= 0: the rate the linear warm-up starts from

  // Throws weft::Error naming the setting, what was expected and what was found.
  void Check() const;
  // The rate of the t-th step (t >= 1) for base rate `base` (>= 0), by the formulas above.
  double Rate(double base, int64_t t) const;
};

}  // namespace weft
