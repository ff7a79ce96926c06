// The copy baseline: what a memory-bound kernel should look like to the memory system. Each thread
// copies 16-byte vectors in a grid-strided loop, so every warp request is 4 whole sectors (a quarter
// warp's 128 bytes) and every byte is read and written once. `emmy check --profile` profiles it beside
// the standard library's elementwise kernels (CPU simulation); tests/gpu/run.sh times it on the GPU as
// the device's copy bandwidth. Hand-written CUDA: it compiles with nvcc, NVRTC and the simulation
// header (backend/sim/emmy_cuda_sim.h) alike.
#ifdef __CUDACC_RTC__
typedef long long int64_t;
#else
#include <stdint.h>
#endif

#ifndef EMMY_HOST_ONLY  // the kernel, for NVRTC and the simulation (not the GPU harness's host compile)
extern "C" __global__ void reference_copy_float4(const float4* __restrict__ in, float4* __restrict__ out, int64_t count) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride) out[i] = in[i];
}
#endif

#ifndef __CUDACC_RTC__
// Copies `bytes` (a multiple of 16) from `in` to `out`: 256 threads a block, at most 4 blocks per SM of
// a 132-SM GPU, each thread a grid-strided loop.
static int reference_copy(const void* in, void* out, int64_t bytes, cudaStream_t stream) {
  const int64_t count = bytes / 16;
  if (count == 0) return 0;
  const int64_t threads = 256, blocks = (count + threads - 1) / threads;
  EMMY_LAUNCH(reference_copy_float4, dim3((unsigned)(blocks < 528 ? blocks : 528)), dim3((unsigned)threads), stream,
              (const float4*)in, (float4*)out, count);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
#endif
