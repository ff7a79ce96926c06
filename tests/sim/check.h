// Shared by the harness mains of the simulation tests: each check that fails is printed (the first few
// of them), and the main exits 1 if any failed.
#pragma once

#include <cstdio>
#include <string>

class Checks {
public:
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    if (++failures_ <= kPrinted) std::printf("MISMATCH: %s\n", what.c_str());
  }
  int exitCode() const {
    if (failures_ > kPrinted) std::printf("... %d mismatches in all\n", failures_);
    return failures_ == 0 ? 0 : 1;
  }

private:
  static constexpr int kPrinted = 10;
  int failures_ = 0;
};
