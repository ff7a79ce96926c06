// Simulation test: an elementwise kernel with a grid-stride loop. The launcher's grid is deliberately
// small, so every thread loops, and the sizes leave a ragged tail.
#include "standalone.h"

__global__ void scale_add_k0(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out,
                             float alpha, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = alpha * x[i] + y[i];
}

extern "C" int scale_add(const float* x, const float* y, float* out, float alpha, int64_t n, cudaStream_t stream) {
  EMMY_LAUNCH(scale_add_k0, dim3(7), dim3(96), stream, x, y, out, alpha, n);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
    return 1;
  }
  return 0;
}
