// The row-kernel baseline: softmax over the last dimension with one warp per row, which reads its row
// once from memory into registers (up to 32 x 32 = 1024 f32 elements per row here; longer rows read it
// a second time for the output), takes the row's max and the sum of exponentials with warp shuffles
// only (no shared memory, no barrier) and writes each output once with one exp and one multiply per
// element. `emmy check --profile` profiles it beside the standard library's softmax, log_softmax,
// layernorm and rmsnorm (CPU simulation). Hand-written CUDA: it compiles with nvcc, NVRTC and the
// simulation header (backend/sim/emmy_cuda_sim.h) alike.
#ifdef __CUDACC_RTC__
typedef long long int64_t;
#else
#include <math.h>
#include <stdint.h>
#endif

#define REFERENCE_PER_LANE 32  // elements each lane keeps in registers
#define kLowest (-3.402823466e38f)  // below every finite input: the max's start and the padding's value

#ifndef EMMY_HOST_ONLY  // the kernel, for NVRTC and the simulation (not the GPU harness's host compile)
extern "C" __global__ void reference_softmax_warp_row(const float* __restrict__ x, float* __restrict__ y, int64_t rows,
                                                      int64_t cols) {
  const int64_t row = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* in = x + row * cols;
  float* out = y + row * cols;
  float kept[REFERENCE_PER_LANE];
  float largest = kLowest;
  for (int k = 0; k < REFERENCE_PER_LANE; ++k) {
    const int64_t c = lane + (int64_t)k * 32;
    kept[k] = c < cols ? in[c] : kLowest;
    largest = fmaxf(largest, kept[k]);
  }
  for (int64_t c = lane + REFERENCE_PER_LANE * 32; c < cols; c += 32) largest = fmaxf(largest, in[c]);
  for (int offset = 16; offset > 0; offset /= 2) largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
  float sum = 0.0f;
  for (int k = 0; k < REFERENCE_PER_LANE; ++k) {
    kept[k] = expf(kept[k] - largest);
    sum += kept[k];
  }
  for (int64_t c = lane + REFERENCE_PER_LANE * 32; c < cols; c += 32) sum += expf(in[c] - largest);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  const float scale = 1.0f / sum;
  for (int k = 0; k < REFERENCE_PER_LANE; ++k) {
    const int64_t c = lane + (int64_t)k * 32;
    if (c < cols) out[c] = kept[k] * scale;
  }
  for (int64_t c = lane + REFERENCE_PER_LANE * 32; c < cols; c += 32) out[c] = expf(in[c] - largest) * scale;
}
#endif

#ifndef __CUDACC_RTC__
// Softmax of every row of x[rows, cols] into y: 4 warps (rows) per block.
static int reference_softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return 0;
  const int64_t rowsPerBlock = 4;
  EMMY_LAUNCH(reference_softmax_warp_row, dim3((unsigned)((rows + rowsPerBlock - 1) / rowsPerBlock)),
              dim3((unsigned)(32 * rowsPerBlock)), stream, x, y, rows, cols);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
#endif
