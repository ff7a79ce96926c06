// float4 loads and stores with a scalar tail against a scalar loop, at sizes around multiples of 4.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"

extern "C" int scale_vec4(const float* x, float* y, float alpha, int64_t n, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

int main() {
  Checks checks;
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{1027}, int64_t{4096}}) {
    std::vector<float> x(n), y(n + 1, -1.0f);
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i) + 0.5f;
    checks.expect(scale_vec4(x.data(), y.data(), -2.0f, n, nullptr) == 0, emmy_last_error());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += y[i] != -2.0f * x[i];
    checks.expect(wrong == 0, std::to_string(wrong) + " wrong elements at n = " + std::to_string(n));
    checks.expect(y[n] == -1.0f, "wrote past the end at n = " + std::to_string(n));
    std::printf("n=%lld: %lld wrong\n", (long long)n, (long long)wrong);
  }
  return checks.exitCode();
}
