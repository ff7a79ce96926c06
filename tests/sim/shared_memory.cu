// Simulation test: two kernels with shared arrays, launched alternately with different sizes, block
// shapes and grid sizes: each block must see only what its own threads wrote.
#include "standalone.h"

// Each block reverses its slice of the input; slots past the end read as -1.
__global__ void reverse_blocks_k0(const int* __restrict__ in, int* __restrict__ out, int64_t n) {
  __shared__ int staged[256];
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  staged[threadIdx.x] = i < n ? in[i] : -1;
  __syncthreads();
  if (i < n) out[i] = staged[blockDim.x - 1 - threadIdx.x];
}

// Each block sums its slice by a tree in shared memory, one barrier per level; blockDim.x is a power of 2.
__global__ void block_sums_k0(const float* __restrict__ in, float* __restrict__ sums, int64_t n) {
  __shared__ float partial[256];
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}

static int check_launch(void) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return 0;
  snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
  return 1;
}

extern "C" int reverse_blocks(const int* in, int* out, int64_t n, unsigned block, cudaStream_t stream) {
  EMMY_LAUNCH(reverse_blocks_k0, dim3((unsigned)((n + block - 1) / block)), dim3(block), stream, in, out, n);
  return check_launch();
}

extern "C" int block_sums(const float* in, float* sums, int64_t n, unsigned block, cudaStream_t stream) {
  EMMY_LAUNCH(block_sums_k0, dim3((unsigned)((n + block - 1) / block)), dim3(block), stream, in, sums, n);
  return check_launch();
}
