// What a generated .cu file has before its kernels, for the hand-written files of these tests: CUDA's
// headers and launch macro under nvcc (the simulation brings its own), the shared-array macro, and the
// error text that host functions set.
#pragma once
#ifndef EMMY_SIMULATE
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define EMMY_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#define EMMY_LAUNCH_SIZED(kernel, grid, block, bytes, stream, ...) \
  kernel<<<(grid), (block), (size_t)(bytes), (stream)>>>(__VA_ARGS__)
#define EMMY_SHARED_SIZED_AT_LAUNCH(type, name, count, offset, elements) \
  extern __shared__ __align__(16) unsigned char emmy_launch_shared[];   \
  type* const name = reinterpret_cast<type*>(emmy_launch_shared + (offset))
static __device__ unsigned emmy_launch_shared_bytes() {
  unsigned bytes;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
  return bytes;
}
#endif
#ifndef EMMY_SHARED
#define EMMY_SHARED(type, name, count) __shared__ type name[count]
#endif
#include <stdint.h>
#include <stdio.h>

extern "C" {
__attribute__((weak)) char emmy_last_error_text[1024];
__attribute__((weak)) const char* emmy_last_error(void) { return emmy_last_error_text; }
}
