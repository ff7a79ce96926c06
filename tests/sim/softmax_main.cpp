// Row softmax through the simulation against a scalar computation in double, at sizes that leave idle
// threads, partial warps of work and several elements per thread; then its speed at 1000 x 1000.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "check.h"

extern "C" int softmax(const float* x, float* y, int64_t N, int64_t D, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

namespace {

std::vector<float> randomValues(size_t count, unsigned seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(-8.0f, 8.0f);
  std::vector<float> values(count);
  for (float& v : values) v = distribution(generator);
  return values;
}

void checkSoftmax(Checks& checks, int64_t N, int64_t D) {
  const std::vector<float> x = randomValues(N * D, static_cast<unsigned>(N * 7919 + D));
  std::vector<float> y(N * D, NAN);
  checks.expect(softmax(x.data(), y.data(), N, D, nullptr) == 0, emmy_last_error());
  double worst = 0;
  for (int64_t r = 0; r < N; ++r) {
    double rowMax = -INFINITY, rowSum = 0;
    for (int64_t j = 0; j < D; ++j) rowMax = std::fmax(rowMax, x[r * D + j]);
    for (int64_t j = 0; j < D; ++j) rowSum += std::exp(double(x[r * D + j]) - rowMax);
    for (int64_t j = 0; j < D; ++j) {
      const double expected = std::exp(double(x[r * D + j]) - rowMax) / rowSum;
      const double error = std::fabs(y[r * D + j] - expected) / (expected + 1e-30);
      worst = std::isnan(error) ? INFINITY : std::fmax(worst, error);
    }
  }
  std::printf("softmax %lldx%lld: max relative error %s\n", (long long)N, (long long)D,
              worst < 1e-5 ? "< 1e-5" : "too large");
  checks.expect(worst < 1e-5,
                "softmax " + std::to_string(N) + "x" + std::to_string(D) + " relative error " + std::to_string(worst));
}

}  // namespace

int main() {
  Checks checks;
  for (auto [N, D] : {std::pair<int64_t, int64_t>{1, 1}, {3, 31}, {5, 33}, {2, 1000}, {7, 4099}, {1, 1024}})
    checkSoftmax(checks, N, D);

  const int64_t N = 1000, D = 1000;
  const std::vector<float> x = randomValues(N * D, 1);
  std::vector<float> y(N * D);
  const auto start = std::chrono::steady_clock::now();
  checks.expect(softmax(x.data(), y.data(), N, D, nullptr) == 0, emmy_last_error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("speed: %.3f s for 1000x1000, %.3g elements/s\n", seconds, N * D / seconds);
  return checks.exitCode();
}
