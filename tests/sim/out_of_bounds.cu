// Simulation test: kernels with out-of-bounds accesses, for a build of the simulated program with
// AddressSanitizer, which must report them from inside the fibers' stacks.
#ifndef EMMY_SIMULATE
#include <cuda_runtime.h>
#define EMMY_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif
#include <stdint.h>

// Reads one element past the end of `x` in the last thread (the bound check is off by one).
__global__ void shifted_copy_k0(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i + 1];
}

// A shared array sized for 32 threads, used by 64, behind a barrier.
__global__ void shared_overflow_k0(float* __restrict__ y) {
  __shared__ float staged[32];
  staged[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  y[threadIdx.x] = staged[threadIdx.x];
}

extern "C" int shifted_copy(const float* x, float* y, int64_t n, cudaStream_t stream) {
  EMMY_LAUNCH(shifted_copy_k0, dim3((unsigned)((n + 63) / 64)), dim3(64), stream, x, y, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int shared_overflow(float* y, cudaStream_t stream) {
  EMMY_LAUNCH(shared_overflow_k0, dim3(2), dim3(64), stream, y);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
