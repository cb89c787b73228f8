#include "examples/common/progress.h"

#include <unistd.h>

#include <algorithm>

namespace examples {

Progress::Progress(std::string label, int total_steps, std::FILE* out, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(std::max(total_steps, 1)),
      out_(out),
      tty_(isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

std::string Progress::Line() const {
  constexpr int kWidth = 24;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int filled = done_ * kWidth / total_;
  const double rate = seconds > 0 ? samples_ / seconds : 0;
  const double eta = done_ > 0 ? seconds * (total_ - done_) / done_ : 0;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s [%s%s] %d/%d  %.0f %s/s  ETA %.1fs", label_.c_str(),
                std::string(filled, '=').c_str(), std::string(kWidth - filled, ' ').c_str(), done_,
                total_, rate, unit_.c_str(), eta);
  return buf;
}

void Progress::Step(int samples) {
  ++done_;
  samples_ += samples;
  const auto now = std::chrono::steady_clock::now();
  if (tty_ && (now - last_draw_ > std::chrono::milliseconds(100) || done_ == total_)) {
    std::fprintf(out_, "\r%s", Line().c_str());
    std::fflush(out_);
    last_draw_ = now;
  }
}

void Progress::Finish(const std::string& summary) {
  std::fprintf(out_, "%s%s  %s\n", tty_ ? "\r" : "", Line().c_str(), summary.c_str());
  std::fflush(out_);
}

}  // namespace examples
