#include "tune/progress.h"

#include <fmt/format.h>

namespace emmy::tune {

namespace {

std::string bestText(const Trial* best) {
  if (!best) return "no candidate ok yet";
  return fmt::format("best {:.4g} ms with {}", best->measurement.milliseconds, candidateText(best->candidate));
}

}  // namespace

void ProgressDisplay::show(const Progress& progress) {
  const Measurement& m = progress.trial.measurement;
  std::string count = progress.planned ? fmt::format("{}/{}", progress.visited, progress.planned) : std::to_string(progress.visited);
  if (!terminal_) {
    fmt::print(out_, "{} [{}] {} ({}): {}{}{}; {}\n", progress.target.kernel, count, candidateText(progress.trial.candidate),
               phaseName(progress.trial.phase), statusName(m.status),
               m.status == Status::Ok ? fmt::format(" {:.4g} ms", m.milliseconds) : " (" + m.message + ")",
               progress.replayed ? " (recorded)" : "", bestText(progress.best));
    std::fflush(out_);
    return;
  }
  constexpr int kWidth = 30;
  int filled = progress.planned ? static_cast<int>(kWidth * progress.visited / progress.planned) : 0;
  std::string bar = progress.planned ? std::string(filled, '#') + std::string(kWidth - filled, '.') : "";
  // \r and clear to the end of the line: the bar is redrawn in place.
  fmt::print(out_, "\r\033[K{} [{}] {} {}", progress.target.kernel, bar, count, bestText(progress.best));
  std::fflush(out_);
  drawn_ = true;
}

void ProgressDisplay::finish() {
  if (drawn_) fmt::print(out_, "\n");
  drawn_ = false;
}

}  // namespace emmy::tune
