// Simulation test: blocks of 1024 threads, the most CUDA allows, each running an inclusive scan of its
// 1024 values with 11 barriers (Hillis-Steele, double-buffered in shared memory), over a large grid.
#include "standalone.h"

__global__ void __launch_bounds__(1024) block_scan_k0(const int* __restrict__ in, int* __restrict__ out) {
  __shared__ int buffers[2][1024];
  const unsigned t = threadIdx.x;
  const int64_t i = (int64_t)blockIdx.x * 1024 + t;
  int current = 0;
  buffers[current][t] = in[i];
  __syncthreads();
  for (unsigned offset = 1; offset < 1024; offset *= 2) {
    const int value = buffers[current][t] + (t >= offset ? buffers[current][t - offset] : 0);
    current ^= 1;
    buffers[current][t] = value;
    __syncthreads();
  }
  out[i] = buffers[current][t];
}

extern "C" int block_scan(const int* in, int* out, int64_t blocks, cudaStream_t stream) {
  EMMY_LAUNCH(block_scan_k0, dim3((unsigned)blocks), dim3(1024), stream, in, out);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
    return 1;
  }
  return 0;
}
