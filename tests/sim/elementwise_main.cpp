// The grid-stride elementwise kernel against a scalar loop: every element written once, exactly.
#include <cstdint>
#include <cstdio>
#include <vector>

#include "check.h"

extern "C" int scale_add(const float* x, const float* y, float* out, float alpha, int64_t n, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

int main() {
  Checks checks;
  for (int64_t n : {int64_t{1}, int64_t{671}, int64_t{672}, int64_t{100003}}) {
    std::vector<float> x(n), y(n), out(n + 1, -1.0f);  // out[n] must stay untouched
    for (int64_t i = 0; i < n; ++i) {
      x[i] = 0.25f * static_cast<float>(i % 1000);
      y[i] = static_cast<float>(i % 7) - 3.0f;
    }
    checks.expect(scale_add(x.data(), y.data(), out.data(), 3.0f, n, nullptr) == 0, emmy_last_error());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += out[i] != 3.0f * x[i] + y[i];
    checks.expect(wrong == 0, std::to_string(wrong) + " wrong elements at n = " + std::to_string(n));
    checks.expect(out[n] == -1.0f, "wrote past the end at n = " + std::to_string(n));
    std::printf("n=%lld: %lld wrong\n", (long long)n, (long long)wrong);
  }
  return checks.exitCode();
}
