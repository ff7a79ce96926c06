// Simulation test: the safety net. Shared arrays declared as generated code declares them (EMMY_SHARED)
// record their accesses: a data race between barriers or an index out of bounds stops the launch with a
// report, while correct patterns (many readers, a barrier between a write and other threads' reads, a
// thread re-using its own element, blocks one after another) pass. Global buffers from cudaMalloc lie
// between guard pages: an access past them is reported with the buffer's name, the thread and the block.
#include "standalone.h"

static int check_launch(void) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return 0;
  snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
  return 1;
}

// One thread writes, every thread reads after a barrier: many readers are fine.
__global__ void broadcast_k0(float* __restrict__ out, bool barrier) {
  EMMY_SHARED(float, value, 1);
  if (threadIdx.x == 0) value[0] = 2.0f * blockIdx.x + 1.0f;
  if (barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = value[0];
}

// Thread 0 reads an element that thread 1 then writes, with or without a barrier between.
__global__ void read_then_write_k0(float* __restrict__ out, bool barrier) {
  EMMY_SHARED(float, staged, 2);
  if (threadIdx.x == 0) out[0] = staged[1];
  if (barrier) __syncthreads();
  if (threadIdx.x == 1) staged[1] = 3.0f;
}

// Two threads write the same element.
__global__ void write_write_k0(void) {
  EMMY_SHARED(int, flag, 1);
  if (threadIdx.x == 5 || threadIdx.x == 9) flag[0] = (int)threadIdx.x;
}

// Each thread uses its own element over and over, compound assignments included, and reads its
// neighbour's only between barriers; the next block reuses the array (a block's accesses never race
// with an earlier block's).
__global__ void own_elements_k0(float* __restrict__ out) {
  EMMY_SHARED(float, mine, 64);
  const unsigned t = threadIdx.x;
  mine[t] = (float)t;
  mine[t] += 1.0f;
  mine[t] *= 2.0f;
  __syncthreads();
  const float neighbour = mine[(t + 1) % blockDim.x];
  __syncthreads();
  mine[t] = mine[t] + neighbour;
  out[blockIdx.x * blockDim.x + t] = mine[t];
}

// A tree sum in shared memory; without the barrier at each level, a thread reads a partial sum before
// its owner is done with it.
__global__ void tree_sum_k0(const float* __restrict__ in, float* __restrict__ sums, bool barrier) {
  EMMY_SHARED(float, partial, 64);
  partial[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    if (barrier) __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = partial[0];
}

// A shared array sized for 32 threads, used by 64; and one read one element before its start.
__global__ void shared_overflow_k0(float* __restrict__ out) {
  EMMY_SHARED(float, staged, 32);
  staged[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = staged[threadIdx.x];
}

__global__ void shared_underflow_k0(float* __restrict__ out) {
  EMMY_SHARED(float, staged, 32);
  out[threadIdx.x] = staged[(int64_t)threadIdx.x - 1];
}

// A shared array sized at launch to n elements (of 64 at most), one per thread: its bounds are what the
// launch sized, and it must lie within the bytes the launch gave.
__global__ void sized_at_launch_k0(float* __restrict__ out, int64_t n) {
  EMMY_SHARED_SIZED_AT_LAUNCH(float, row, 64, (int64_t)0, n);
  row[threadIdx.x] = (float)threadIdx.x + (float)emmy_launch_shared_bytes();
  __syncthreads();
  out[threadIdx.x] = row[threadIdx.x];
}

// Global buffers: the bound check is off by one, reading past the end of x; a write far before the
// start of y; a read through a null pointer.
__global__ void shifted_copy_k0(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i + 1];
}

__global__ void write_before_k0(float* __restrict__ y, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i - 1000] = 0.0f;
}

__global__ void wild_read_k0(const float* __restrict__ nowhere, float* __restrict__ y) {
  y[threadIdx.x] = nowhere[4];
}

// Locals larger than a simulated thread's stack (64 KiB), written from the top down.
__global__ void deep_stack_k0(float* __restrict__ out) {
  volatile float big[32 * 1024];
  for (int k = 32 * 1024 - 1; k >= 0; k -= 256) big[k] = (float)k;
  out[threadIdx.x] = big[threadIdx.x];
}

// A temporary of the host function, as generated code allocates them, written one element too far.
__global__ void fill_temporary_k0(int64_t* __restrict__ scratch, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) scratch[i] = i;
}

extern "C" int broadcast(float* out, unsigned blocks, bool barrier, cudaStream_t stream) {
  EMMY_LAUNCH(broadcast_k0, dim3(blocks), dim3(64), stream, out, barrier);
  return check_launch();
}

extern "C" int read_then_write(float* out, bool barrier, cudaStream_t stream) {
  EMMY_LAUNCH(read_then_write_k0, dim3(1), dim3(2), stream, out, barrier);
  return check_launch();
}

extern "C" int write_write(cudaStream_t stream) {
  EMMY_LAUNCH(write_write_k0, dim3(1), dim3(32), stream);
  return check_launch();
}

extern "C" int own_elements(float* out, cudaStream_t stream) {
  EMMY_LAUNCH(own_elements_k0, dim3(2), dim3(64), stream, out);
  return check_launch();
}

extern "C" int tree_sum(const float* in, float* sums, unsigned blocks, bool barrier, cudaStream_t stream) {
  EMMY_LAUNCH(tree_sum_k0, dim3(blocks), dim3(64), stream, in, sums, barrier);
  return check_launch();
}

extern "C" int shared_overflow(float* out, cudaStream_t stream) {
  EMMY_LAUNCH(shared_overflow_k0, dim3(2), dim3(64), stream, out);
  return check_launch();
}

extern "C" int shared_underflow(float* out, cudaStream_t stream) {
  EMMY_LAUNCH(shared_underflow_k0, dim3(1), dim3(32), stream, out);
  return check_launch();
}

extern "C" int sized_at_launch(float* out, int64_t n, int64_t bytes, unsigned threads, cudaStream_t stream) {
  EMMY_LAUNCH_SIZED(sized_at_launch_k0, dim3(1), dim3(threads), bytes, stream, out, n);
  return check_launch();
}

extern "C" int shifted_copy(const float* x, float* y, int64_t n, cudaStream_t stream) {
  EMMY_LAUNCH(shifted_copy_k0, dim3((unsigned)((n + 63) / 64)), dim3(64), stream, x, y, n);
  return check_launch();
}

extern "C" int write_before(float* y, int64_t n, cudaStream_t stream) {
  EMMY_LAUNCH(write_before_k0, dim3((unsigned)((n + 63) / 64)), dim3(64), stream, y, n);
  return check_launch();
}

extern "C" int wild_read(float* y, cudaStream_t stream) {
  EMMY_LAUNCH(wild_read_k0, dim3(1), dim3(32), stream, (const float*)0, y);
  return check_launch();
}

extern "C" int deep_stack(float* out, cudaStream_t stream) {
  EMMY_LAUNCH(deep_stack_k0, dim3(1), dim3(32), stream, out);
  return check_launch();
}

extern "C" int fill_temporary(int64_t n, cudaStream_t stream) {
  int64_t* scratch = nullptr;
  if (cudaMallocAsync((void**)&scratch, (size_t)n * sizeof(int64_t), stream) != cudaSuccess) return 1;
  EMMY_LAUNCH(fill_temporary_k0, dim3((unsigned)((n + 127) / 128)), dim3(128), stream, scratch, n);
  const int status = check_launch();
  cudaFreeAsync(scratch, stream);
  return status;
}
