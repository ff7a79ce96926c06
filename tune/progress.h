// The progress of `emmy tune` on standard error: on a terminal, one bar redrawn in place with the best
// candidate so far; otherwise (a log, CI) one line per candidate.
#pragma once

#include <cstdio>

#include "tune/tuner.h"

namespace emmy::tune {

class ProgressDisplay {
public:
  ProgressDisplay(std::FILE* out, bool terminal) : out_(out), terminal_(terminal) {}
  void show(const Progress& progress);
  // Ends the bar's line (on a terminal).
  void finish();

private:
  std::FILE* out_;
  bool terminal_;
  bool drawn_ = false;
};

}  // namespace emmy::tune
