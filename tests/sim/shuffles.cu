// Simulation test: every warp shuffle with and without `width`, on every type the backend shuffles, in a
// block of 48 threads whose second warp has only 16 lanes; and lanes of a 2-D block.
#include "standalone.h"

// ints[t * 7 + k]: the k-th integer shuffle of thread t, in the order the harness expects them.
__global__ void shuffles_k0(int* __restrict__ ints, float* __restrict__ floats, double* __restrict__ doubles,
                            int64_t* __restrict__ longs, unsigned* __restrict__ unsigneds) {
  const unsigned t = threadIdx.x;
  const int v = 100 + (int)t;
  int* out = ints + t * 7;
  out[0] = __shfl_down_sync(0xffffffffu, v, 3, 8);
  out[1] = __shfl_down_sync(0xffffffffu, v, 5);
  out[2] = __shfl_up_sync(0xffffffffu, v, 2, 16);
  out[3] = __shfl_xor_sync(0xffffffffu, v, 9, 16);
  out[4] = __shfl_sync(0xffffffffu, v, 35, 8);
  out[5] = __shfl_xor_sync(0xffffffffu, v, 8, 8);
  out[6] = (int)__activemask();
  floats[t] = __shfl_xor_sync(0xffffffffu, 0.5f * t, 1);
  doubles[t] = __shfl_down_sync(0xffffffffu, 0.25 * t, 1);
  longs[t] = __shfl_up_sync(0xffffffffu, (int64_t)t << 33, 1);
  unsigneds[t] = __shfl_sync(0xffffffffu, 7u * t, 0);
}

// Lanes follow the linear thread index x + y * blockDim.x.
__global__ void shuffles_2d_k0(int* __restrict__ out) {
  const int linear = (int)(threadIdx.x + threadIdx.y * blockDim.x);
  out[2 * linear] = __shfl_xor_sync(0xffffffffu, linear, 8);
  out[2 * linear + 1] = __shfl_down_sync(0xffffffffu, (int)threadIdx.y, 8);
}

static int fail(cudaError_t error) {
  snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
  return 1;
}

extern "C" int shuffles(int* ints, float* floats, double* doubles, int64_t* longs, unsigned* unsigneds, int* ints_2d,
                        cudaStream_t stream) {
  EMMY_LAUNCH(shuffles_k0, dim3(1), dim3(48), stream, ints, floats, doubles, longs, unsigneds);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return fail(error);
  EMMY_LAUNCH(shuffles_2d_k0, dim3(1), dim3(8, 6), stream, ints_2d);
  error = cudaGetLastError();
  if (error != cudaSuccess) return fail(error);
  return 0;
}
