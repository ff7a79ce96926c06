// Prints what each failing host function returns and reports (the test compares the text), then shows
// that the simulation still runs a good kernel, from another generated file, correctly afterwards.
#include <cstdint>
#include <cstdio>
#include <vector>

extern "C" int diverged_barrier(int* started, cudaStream_t stream);
extern "C" int early_exit_barrier(unsigned block_x, unsigned block_y, int64_t n, cudaStream_t stream);
extern "C" int leading_exit_barrier(cudaStream_t stream);
extern "C" int half_warp_shuffle(float* out, cudaStream_t stream);
extern "C" int shuffle_or_barrier(cudaStream_t stream);
extern "C" int barrier_or_shuffle(cudaStream_t stream);
extern "C" int bad_width(cudaStream_t stream);
extern "C" int partial_mask(cudaStream_t stream);
extern "C" int scale_add(const float* x, const float* y, float* out, float alpha, int64_t n, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

namespace {
void show(const char* name, int status) { std::printf("%s: %d: %s\n", name, status, emmy_last_error()); }
}  // namespace

int main() {
  int started[3] = {0, 0, 0};
  show("diverged_barrier", diverged_barrier(started, nullptr));
  std::printf("blocks started: %d %d %d\n", started[0], started[1], started[2]);
  show("early_exit_barrier 1-D", early_exit_barrier(40, 1, 37, nullptr));
  show("early_exit_barrier 2-D", early_exit_barrier(32, 3, 32, nullptr));
  show("early_exit_barrier runs", early_exit_barrier(4, 8, 2 * 4 + 2, nullptr));
  show("leading_exit_barrier", leading_exit_barrier(nullptr));
  float out[32];
  show("half_warp_shuffle", half_warp_shuffle(out, nullptr));
  show("shuffle_or_barrier", shuffle_or_barrier(nullptr));
  show("barrier_or_shuffle", barrier_or_shuffle(nullptr));
  show("bad_width", bad_width(nullptr));
  show("partial_mask", partial_mask(nullptr));
  std::printf("cudaGetLastError after the report was read: %d\n", static_cast<int>(cudaGetLastError()));

  const int64_t n = 1000;
  std::vector<float> x(n, 1.0f), y(n, 2.0f), result(n);
  const int status = scale_add(x.data(), y.data(), result.data(), 3.0f, n, nullptr);
  int64_t wrong = 0;
  for (float r : result) wrong += r != 5.0f;
  std::printf("a good launch afterwards: %d, %lld wrong\n", status, static_cast<long long>(wrong));
  return 0;
}
