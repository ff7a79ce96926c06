// Simulation test: a row softmax in the shape the backend emits for reductions, one block per row: a
// max and a sum, each reduced through warp shuffles and shared memory between two barriers.
#include "standalone.h"

static __device__ __forceinline__ float combine(float a, float b, bool isMax) { return isMax ? fmaxf(a, b) : a + b; }

// The block-wide max or sum of `value`, returned to every thread. blockDim.x is a multiple of 32.
static __device__ float block_reduce(float value, bool isMax) {
  __shared__ float warp_partials[32];
  __shared__ float result;
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    value = combine(value, __shfl_xor_sync(0xffffffffu, value, offset), isMax);
  if (lane == 0) warp_partials[warp] = value;
  __syncthreads();
  if (warp == 0) {
    value = lane < blockDim.x / 32 ? warp_partials[lane] : (isMax ? -INFINITY : 0.0f);
    for (int offset = 16; offset > 0; offset /= 2)
      value = combine(value, __shfl_xor_sync(0xffffffffu, value, offset), isMax);
    if (lane == 0) result = value;
  }
  __syncthreads();
  return result;
}

__global__ void __launch_bounds__(1024) softmax_k0(const float* __restrict__ x, float* __restrict__ y, int64_t D) {
  const float* row = x + blockIdx.x * D;
  float* out = y + blockIdx.x * D;
  float row_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) row_max = fmaxf(row_max, row[j]);
  row_max = block_reduce(row_max, true);
  float row_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) row_sum += expf(row[j] - row_max);
  row_sum = block_reduce(row_sum, false);
  const float inverse = 1.0f / row_sum;
  for (int64_t j = threadIdx.x; j < D; j += blockDim.x) out[j] = expf(row[j] - row_max) * inverse;
}

extern "C" int softmax(const float* x, float* y, int64_t N, int64_t D, cudaStream_t stream) {
  if (N == 0 || D == 0) return 0;
  const unsigned threads = D >= 1024 ? 1024u : (unsigned)((D + 31) / 32 * 32);
  EMMY_LAUNCH(softmax_k0, dim3((unsigned)N), dim3(threads), stream, x, y, D);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
    return 1;
  }
  return 0;
}
