// Runs the out-of-bounds kernel named on the command line ("global" or "shared"); built with
// AddressSanitizer, the program must stop with its report.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

extern "C" int shifted_copy(const float* x, float* y, int64_t n, cudaStream_t stream);
extern "C" int shared_overflow(float* y, cudaStream_t stream);

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "";
  std::vector<float> x(100, 1.0f), y(100);
  const int status =
      which == "global" ? shifted_copy(x.data(), y.data(), 100, nullptr) : shared_overflow(y.data(), nullptr);
  std::printf("no error seen: %d\n", status);
  return 0;
}
