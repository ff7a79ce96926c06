// Calls the softmax that Emmy generated from examples/softmax.emmy (see CMakeLists.txt) on a 4 x 8
// matrix and prints each row's sum, which softmax makes 1.
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

#include "softmax.h"

int main() {
  const int64_t rows = 4, columns = 8;
  std::vector<float> x(rows * columns), y(rows * columns);
  for (size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(k % 5) - 2.0f;
  float *deviceX = nullptr, *deviceY = nullptr;
  size_t bytes = x.size() * sizeof(float);
  if (cudaMalloc(&deviceX, bytes) != cudaSuccess || cudaMalloc(&deviceY, bytes) != cudaSuccess) {
    std::fprintf(stderr, "no CUDA device to run on\n");
    return 1;
  }
  cudaMemcpy(deviceX, x.data(), bytes, cudaMemcpyHostToDevice);
  if (softmax(deviceX, deviceY, rows, columns, /*stream=*/nullptr) != 0) {
    std::fprintf(stderr, "softmax failed: %s\n", emmy_last_error());
    return 1;
  }
  cudaMemcpy(y.data(), deviceY, bytes, cudaMemcpyDeviceToHost);
  for (int64_t row = 0; row < rows; ++row) {
    float sum = 0;
    for (int64_t column = 0; column < columns; ++column) sum += y[row * columns + column];
    std::printf("row %lld sums to %.6f\n", static_cast<long long>(row), sum);
  }
  cudaFree(deviceX);
  cudaFree(deviceY);
  return 0;
}
