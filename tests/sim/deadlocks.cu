// Simulation test: kernels that a GPU would hang on or that break CUDA's rules for barriers and
// shuffles. Each launch must stop with a report, the host function must return non-zero, and the
// process must go on.
#include "standalone.h"

// Every block records that it started, so the harness sees that the blocks after the deadlock never ran.
__global__ void diverged_barrier_k0(int* __restrict__ started) {
  if (threadIdx.x == 0) started[blockIdx.x] = 1;
  if (threadIdx.x < 32) __syncthreads();
}

__global__ void early_exit_barrier_k0(int64_t n) {
  if ((int64_t)(threadIdx.x + threadIdx.y * blockDim.x) >= n) return;
  __syncthreads();
}

// The first threads leave before the others arrive: a barrier that counted only the threads still
// running would wrongly release here.
__global__ void leading_exit_barrier_k0(void) {
  if (threadIdx.x < 3) return;
  __syncthreads();
}

__global__ void half_warp_shuffle_k0(float* __restrict__ out) {
  float value = (float)threadIdx.x;
  if (threadIdx.x < 16) value = __shfl_xor_sync(0xffffffffu, value, 1);
  out[threadIdx.x] = value;
}

__global__ void shuffle_or_barrier_k0(void) {
  if (threadIdx.x % 32 < 16)
    __shfl_down_sync(0xffffffffu, 1.0f, 1);
  else
    __syncthreads();
}

__global__ void barrier_or_shuffle_k0(void) {
  if (threadIdx.x < 32)
    __syncthreads();
  else if (threadIdx.x < 48)
    __shfl_xor_sync(0xffffffffu, 1, 1);
}

__global__ void bad_width_k0(void) { __shfl_xor_sync(0xffffffffu, 1.0, 1, 12); }

__global__ void partial_mask_k0(void) { __shfl_xor_sync(0x0000ffffu, 1, 1); }

static int check_launch(void) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return 0;
  snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
  return 1;
}

extern "C" int diverged_barrier(int* started, cudaStream_t stream) {
  EMMY_LAUNCH(diverged_barrier_k0, dim3(3), dim3(64), stream, started);
  return check_launch();
}

extern "C" int early_exit_barrier(unsigned block_x, unsigned block_y, int64_t n, cudaStream_t stream) {
  EMMY_LAUNCH(early_exit_barrier_k0, dim3(2, 2), dim3(block_x, block_y), stream, n);
  return check_launch();
}

extern "C" int leading_exit_barrier(cudaStream_t stream) {
  EMMY_LAUNCH(leading_exit_barrier_k0, dim3(1), dim3(40), stream);
  return check_launch();
}

extern "C" int half_warp_shuffle(float* out, cudaStream_t stream) {
  EMMY_LAUNCH(half_warp_shuffle_k0, dim3(1), dim3(32), stream, out);
  return check_launch();
}

extern "C" int shuffle_or_barrier(cudaStream_t stream) {
  EMMY_LAUNCH(shuffle_or_barrier_k0, dim3(1), dim3(64), stream);
  return check_launch();
}

extern "C" int barrier_or_shuffle(cudaStream_t stream) {
  EMMY_LAUNCH(barrier_or_shuffle_k0, dim3(1), dim3(64), stream);
  return check_launch();
}

extern "C" int bad_width(cudaStream_t stream) {
  EMMY_LAUNCH(bad_width_k0, dim3(1), dim3(32), stream);
  return check_launch();
}

extern "C" int partial_mask(cudaStream_t stream) {
  EMMY_LAUNCH(partial_mask_k0, dim3(1), dim3(32), stream);
  return check_launch();
}
