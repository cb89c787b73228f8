// A progress bar for training loops: batches done, samples (or tokens, ...) per second, time left.
//
//   Progress bar("epoch 3", num_batches);
//   for (...) { ...; bar.Step(batch_size); }
//   bar.Finish("loss 0.123  accuracy 97.2%");
//
// Redraws in place on a terminal; elsewhere (a log, a test) prints only the final line.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace examples {

class Progress {
 public:
  // `unit` names what Step counts: "samples" -> "1234 samples/s".
  Progress(std::string label, int total_steps, std::FILE* out = stdout,
           std::string unit = "samples");
  void Step(int samples);
  void Finish(const std::string& summary);

 private:
  std::string Line() const;

  std::string label_, unit_;
  int total_, done_ = 0;
  long samples_ = 0;
  std::FILE* out_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace examples
