// Alternating launches of two shared-memory kernels against scalar computations.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"

extern "C" int reverse_blocks(const int* in, int* out, int64_t n, unsigned block, cudaStream_t stream);
extern "C" int block_sums(const float* in, float* sums, int64_t n, unsigned block, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

namespace {

void checkReverse(Checks& checks, int64_t n, unsigned block) {
  std::vector<int> in(n), out(n, -7);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<int>(i * 3 + 1);
  checks.expect(reverse_blocks(in.data(), out.data(), n, block, nullptr) == 0, emmy_last_error());
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t mirror = i / block * block + (block - 1 - i % block);
    wrong += out[i] != (mirror < n ? in[mirror] : -1);
  }
  checks.expect(wrong == 0, "reverse n=" + std::to_string(n) + " block=" + std::to_string(block));
  std::printf("reverse n=%lld block=%u: %lld wrong\n", (long long)n, block, (long long)wrong);
}

void checkSums(Checks& checks, int64_t n, unsigned block) {
  const int64_t blocks = (n + block - 1) / block;
  std::vector<float> in(n), sums(blocks, -1.0f);
  for (int64_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 13);  // small integers: every sum is exact
  checks.expect(block_sums(in.data(), sums.data(), n, block, nullptr) == 0, emmy_last_error());
  int64_t wrong = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    float expected = 0;
    for (int64_t i = b * block; i < n && i < (b + 1) * block; ++i) expected += in[i];
    wrong += sums[b] != expected;
  }
  checks.expect(wrong == 0, "sums n=" + std::to_string(n) + " block=" + std::to_string(block));
  std::printf("sums n=%lld block=%u: %lld wrong\n", (long long)n, block, (long long)wrong);
}

}  // namespace

int main() {
  Checks checks;
  checkReverse(checks, 1000, 256);
  checkSums(checks, 777, 128);
  checkReverse(checks, 5, 64);
  checkSums(checks, 1, 256);
  checkReverse(checks, 513, 256);
  checkSums(checks, 3000, 32);
  checkReverse(checks, 1000, 256);
  return checks.exitCode();
}
