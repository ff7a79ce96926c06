// Prints what each host function of safety.cu returns and reports (the test compares the text), and
// checks the results of the launches that must pass.
#include <cstdint>
#include <cstdio>
#include <string>

#include "check.h"

extern "C" int broadcast(float* out, unsigned blocks, bool barrier, cudaStream_t stream);
extern "C" int read_then_write(float* out, bool barrier, cudaStream_t stream);
extern "C" int write_write(cudaStream_t stream);
extern "C" int own_elements(float* out, cudaStream_t stream);
extern "C" int tree_sum(const float* in, float* sums, unsigned blocks, bool barrier, cudaStream_t stream);
extern "C" int shared_overflow(float* out, cudaStream_t stream);
extern "C" int shared_underflow(float* out, cudaStream_t stream);
extern "C" int sized_at_launch(float* out, int64_t n, int64_t bytes, unsigned threads, cudaStream_t stream);
extern "C" int shifted_copy(const float* x, float* y, int64_t n, cudaStream_t stream);
extern "C" int write_before(float* y, int64_t n, cudaStream_t stream);
extern "C" int wild_read(float* y, cudaStream_t stream);
extern "C" int deep_stack(float* out, cudaStream_t stream);
extern "C" int fill_temporary(int64_t n, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

namespace {

void show(const char* name, int status) { std::printf("%s: %d: %s\n", name, status, status ? emmy_last_error() : "ok"); }

// Device memory as generated code gets it, between guard pages.
float* deviceFloats(int64_t count) {
  void* data = nullptr;
  if (cudaMalloc(&data, static_cast<size_t>(count) * sizeof(float)) != cudaSuccess) std::abort();
  return static_cast<float*>(data);
}

}  // namespace

int main() {
  Checks checks;
  float* out = deviceFloats(128);
  float* in = deviceFloats(128);
  for (int k = 0; k < 128; ++k) in[k] = static_cast<float>(k % 7);

  show("broadcast with a barrier", broadcast(out, 2, true, nullptr));
  for (int k = 0; k < 128; ++k) checks.expect(out[k] == (k < 64 ? 1.0f : 3.0f), "broadcast " + std::to_string(k));
  show("broadcast without a barrier", broadcast(out, 2, false, nullptr));
  show("read then write with a barrier", read_then_write(out, true, nullptr));
  show("read then write without a barrier", read_then_write(out, false, nullptr));
  show("write write", write_write(nullptr));
  show("own elements", own_elements(out, nullptr));
  for (int k = 0; k < 128; ++k) {
    const int t = k % 64, next = (t + 1) % 64;
    checks.expect(out[k] == 2.0f * (t + 1) + 2.0f * (next + 1), "own elements " + std::to_string(k));
  }
  show("tree sum with barriers", tree_sum(in, out, 2, true, nullptr));
  for (int block = 0; block < 2; ++block) {
    float sum = 0;
    for (int k = 0; k < 64; ++k) sum += in[block * 64 + k];
    checks.expect(out[block] == sum, "tree sum " + std::to_string(block));
  }
  show("tree sum without barriers", tree_sum(in, out, 2, false, nullptr));
  show("shared overflow", shared_overflow(out, nullptr));
  show("shared underflow", shared_underflow(out, nullptr));
  show("sized at launch", sized_at_launch(out, 32, 128, 32, nullptr));
  for (int k = 0; k < 32; ++k) checks.expect(out[k] == 128.0f + k, "sized at launch " + std::to_string(k));
  show("sized beyond the launch", sized_at_launch(out, 32, 96, 32, nullptr));
  show("past what the launch sized", sized_at_launch(out, 32, 256, 40, nullptr));
  show("more than a block may have", sized_at_launch(out, 32, 227 * 1024 + 16, 32, nullptr));

  float* x = deviceFloats(100);
  float* y = deviceFloats(100);
  show("shifted copy", shifted_copy(x, y, 100, nullptr));
  show("write before", write_before(y, 100, nullptr));
  show("wild read", wild_read(y, nullptr));
  show("deep stack", deep_stack(y, nullptr));
  show("fill temporary", fill_temporary(300, nullptr));

  show("broadcast afterwards", broadcast(out, 2, true, nullptr));
  for (int k = 0; k < 128; ++k) checks.expect(out[k] == (k < 64 ? 1.0f : 3.0f), "broadcast afterwards " + std::to_string(k));
  const cudaError_t freed = cudaFree(x);
  std::printf("cudaFree: %d, twice: %d\n", static_cast<int>(freed), static_cast<int>(cudaFree(x)));
  return checks.exitCode();
}
