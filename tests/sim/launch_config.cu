// Simulation test: 3-D grids and blocks, the order blocks and threads run in, atomics, and launches
// that CUDA rejects.
#include "standalone.h"

// order[global thread index] = how many threads ran before this one.
__global__ void record_order_k0(int* __restrict__ order, int* __restrict__ counter, float* __restrict__ total) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  order[block * (blockDim.x * blockDim.y * blockDim.z) + thread] = atomicAdd(counter, 1);
  atomicAdd(total, 0.5f);
}

extern "C" void record_order_unchecked(int* order, int* counter, float* total, dim3 grid, dim3 block,
                                       cudaStream_t stream) {
  EMMY_LAUNCH(record_order_k0, grid, block, stream, order, counter, total);
}

extern "C" int record_order(int* order, int* counter, float* total, dim3 grid, dim3 block, cudaStream_t stream) {
  record_order_unchecked(order, counter, total, grid, block, stream);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
    return 1;
  }
  return 0;
}
