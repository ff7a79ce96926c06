// A 3-D launch runs every thread once, blocks in x, y, z order and the threads of a block in linear
// order (none of them waits here); invalid launches report why, and the error state follows CUDA's
// cudaGetLastError / cudaPeekAtLastError.
#include <cstdio>
#include <vector>

#include "check.h"

extern "C" void record_order_unchecked(int* order, int* counter, float* total, dim3 grid, dim3 block,
                                       cudaStream_t stream);
extern "C" int record_order(int* order, int* counter, float* total, dim3 grid, dim3 block, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

int main() {
  Checks checks;
  const dim3 grid(2, 3, 2), block(4, 2, 3);
  std::vector<int> order(12 * 24, -1);
  int counter = 0;
  float total = 0;
  checks.expect(record_order(order.data(), &counter, &total, grid, block, nullptr) == 0, emmy_last_error());
  int outOfOrder = 0;
  for (int i = 0; i < 12 * 24; ++i) outOfOrder += order[i] != i;
  checks.expect(outOfOrder == 0 && counter == 12 * 24 && total == 0.5f * 12 * 24, "3-D launch order and atomics");
  std::printf("3-D launch: %d threads ran, %d out of order, total %.1f\n", counter, outOfOrder, total);

  const struct {
    dim3 grid, block;
  } invalid[] = {{dim3(1), dim3(1025)}, {dim3(1), dim3(32, 32, 2)}, {dim3(1), dim3(1, 1, 65)},
                 {dim3(0), dim3(32)},   {dim3(1, 65536), dim3(32)}, {dim3(1), dim3(32, 0)}};
  for (const auto& launch : invalid) {
    counter = 0;
    const int status = record_order(order.data(), &counter, &total, launch.grid, launch.block, nullptr);
    std::printf("%d: %s (%d threads ran)\n", status, emmy_last_error(), counter);
  }

  record_order_unchecked(order.data(), &counter, &total, dim3(1), dim3(2048), nullptr);
  const cudaError_t peeked = cudaPeekAtLastError(), peekedAgain = cudaPeekAtLastError();
  const cudaError_t read = cudaGetLastError(), readAgain = cudaGetLastError();
  std::printf("peek %d, peek %d, get %d, get %d\n", peeked, peekedAgain, read, readAgain);
  std::printf("cudaGetErrorString(cudaErrorInvalidValue): %s\n", cudaGetErrorString(cudaErrorInvalidValue));
  return checks.exitCode();
}
