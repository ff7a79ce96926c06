// 1000 blocks of 1024 threads, each an inclusive scan, against a sequential scan; and how long it took.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"

extern "C" int block_scan(const int* in, int* out, int64_t blocks, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

int main() {
  Checks checks;
  const int64_t blocks = 1000, n = blocks * 1024;
  std::vector<int> in(n), out(n);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int>(i % 5) - 2;
  const auto start = std::chrono::steady_clock::now();
  checks.expect(block_scan(in.data(), out.data(), blocks, nullptr) == 0, emmy_last_error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t wrong = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    int sum = 0;
    for (int64_t i = b * 1024; i < (b + 1) * 1024; ++i) wrong += out[i] != (sum += in[i]);
  }
  checks.expect(wrong == 0, std::to_string(wrong) + " wrong prefix sums");
  std::printf("%lld blocks of 1024 threads: %lld wrong\n", (long long)blocks, (long long)wrong);
  std::printf("speed: %.3f s, %.3g thread barriers/s\n", seconds, blocks * 1024 * 11 / seconds);
  return checks.exitCode();
}
