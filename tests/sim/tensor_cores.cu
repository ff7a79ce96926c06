// Simulation test: the tensor-core built-ins emmy_ldmatrix and emmy_mma_m16n8k16 (ldmatrix.sync.aligned.m8n8
// and mma.sync.aligned.m16n8k16 of the PTX ISA), as a generated matmul calls them: kernels that write
// every lane's fragments out for tensor_cores_main.cpp to check against the ISA's layout tables, a
// matmul through shared tiles, and kernels that break the rules (races, a misaligned or out-of-bounds
// row, partial or mixed warps), each of which must stop the launch with a report.
#include "standalone.h"

static int check_launch(void) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return 0;
  snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
  return 1;
}

// --- Fragment layouts -------------------------------------------------------------------------------

// Shared memory holds `values` (1024 16-bit patterns); thread t passes rowStarts[t]; fragments[4t + m]
// receives its register m.
template <int Count, bool Transpose>
__device__ void ldmatrix_body(const unsigned short* __restrict__ values, const int64_t* __restrict__ rowStarts,
                              uint32_t* __restrict__ fragments) {
  EMMY_SHARED(__half, tile, 1024);
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) tile[i] = __ushort_as_half(values[i]);
  __syncthreads();
  uint32_t fragment[4] = {0, 0, 0, 0};
  emmy_ldmatrix<Count, Transpose>(fragment, tile, rowStarts[threadIdx.x]);
  for (int m = 0; m < Count; ++m) fragments[threadIdx.x * 4 + m] = fragment[m];
}

#define LDMATRIX_KERNEL(name, count, transpose)                                                              \
  __global__ void name(const unsigned short* __restrict__ values, const int64_t* __restrict__ rowStarts,     \
                       uint32_t* __restrict__ fragments) {                                                   \
    ldmatrix_body<count, transpose>(values, rowStarts, fragments);                                           \
  }
LDMATRIX_KERNEL(ldmatrix_x1_k0, 1, false)
LDMATRIX_KERNEL(ldmatrix_x2_k0, 2, false)
LDMATRIX_KERNEL(ldmatrix_x4_k0, 4, false)
LDMATRIX_KERNEL(ldmatrix_x1_trans_k0, 1, true)
LDMATRIX_KERNEL(ldmatrix_x2_trans_k0, 2, true)
LDMATRIX_KERNEL(ldmatrix_x4_trans_k0, 4, true)
#undef LDMATRIX_KERNEL

// Two warps (64 threads), each loading its own matrices.
extern "C" int ldmatrix_layout(int count, int transpose, const unsigned short* values, const int64_t* rowStarts,
                               uint32_t* fragments, cudaStream_t stream) {
  const dim3 grid(1), block(64);
  if (count == 1 && !transpose) EMMY_LAUNCH(ldmatrix_x1_k0, grid, block, stream, values, rowStarts, fragments);
  if (count == 2 && !transpose) EMMY_LAUNCH(ldmatrix_x2_k0, grid, block, stream, values, rowStarts, fragments);
  if (count == 4 && !transpose) EMMY_LAUNCH(ldmatrix_x4_k0, grid, block, stream, values, rowStarts, fragments);
  if (count == 1 && transpose) EMMY_LAUNCH(ldmatrix_x1_trans_k0, grid, block, stream, values, rowStarts, fragments);
  if (count == 2 && transpose) EMMY_LAUNCH(ldmatrix_x2_trans_k0, grid, block, stream, values, rowStarts, fragments);
  if (count == 4 && transpose) EMMY_LAUNCH(ldmatrix_x4_trans_k0, grid, block, stream, values, rowStarts, fragments);
  return check_launch();
}

// Thread t's A, B and C fragments at a[4t..], b[2t..], c[4t..]; its D to d[4t..].
template <class T>
__device__ void mma_body(const uint32_t* __restrict__ a, const uint32_t* __restrict__ b, const float* __restrict__ c,
                         float* __restrict__ d) {
  const int t = threadIdx.x;
  const uint32_t aFragment[4] = {a[4 * t], a[4 * t + 1], a[4 * t + 2], a[4 * t + 3]};
  const uint32_t bFragment[2] = {b[2 * t], b[2 * t + 1]};
  float accumulators[4] = {c[4 * t], c[4 * t + 1], c[4 * t + 2], c[4 * t + 3]};
  emmy_mma_m16n8k16<T>(accumulators, aFragment, bFragment);
  for (int i = 0; i < 4; ++i) d[4 * t + i] = accumulators[i];
}

__global__ void mma_f16_k0(const uint32_t* __restrict__ a, const uint32_t* __restrict__ b, const float* __restrict__ c,
                           float* __restrict__ d) {
  mma_body<__half>(a, b, c, d);
}
__global__ void mma_bf16_k0(const uint32_t* __restrict__ a, const uint32_t* __restrict__ b, const float* __restrict__ c,
                            float* __restrict__ d) {
  mma_body<__nv_bfloat16>(a, b, c, d);
}

// Two warps, each multiplying its own matrices.
extern "C" int mma_fragments(int bf16, const uint32_t* a, const uint32_t* b, const float* c, float* d,
                             cudaStream_t stream) {
  if (bf16)
    EMMY_LAUNCH(mma_bf16_k0, dim3(1), dim3(64), stream, a, b, c, d);
  else
    EMMY_LAUNCH(mma_f16_k0, dim3(1), dim3(64), stream, a, b, c, d);
  return check_launch();
}

// --- A matmul as generated code does it ----------------------------------------------------------------

// C (M x N, f32) = A (M x K) * B (K x N), both row-major, M and N multiples of 64 and K of 16. A block of
// 4 warps computes a 64 x 64 tile, each warp 32 x 32 of it: 2 x 4 mma tiles of 16 x 8, whose A fragments
// come from ldmatrix.x4 of the A tile and B fragments (two n-tiles at a time) from ldmatrix.x4.trans of the
// row-major B tile.
template <class T>
__device__ void matmul_body(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C, int64_t N,
                            int64_t K) {
  EMMY_SHARED(T, a_tile, 64 * 16);  // [row][k]
  EMMY_SHARED(T, b_tile, 16 * 64);  // [k][column]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t)blockIdx.y * 64, col0 = (int64_t)blockIdx.x * 64;
  const int wm = warp / 2 * 32, wn = warp % 2 * 32;
  float acc[2][4][4] = {};
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    for (int i = threadIdx.x; i < 64 * 16; i += blockDim.x) {
      a_tile[i] = A[(row0 + i / 16) * K + k0 + i % 16];
      b_tile[i] = B[(k0 + i / 64) * N + col0 + i % 64];
    }
    __syncthreads();
    uint32_t a[2][4], b[4][2];
    for (int mi = 0; mi < 2; ++mi) emmy_ldmatrix<4, false>(a[mi], a_tile, (wm + mi * 16 + lane % 16) * 16 + lane / 16 * 8);
    for (int nj = 0; nj < 4; nj += 2) {
      uint32_t pair[4];
      emmy_ldmatrix<4, true>(pair, b_tile, (lane % 16) * 64 + wn + (nj + lane / 16) * 8);
      b[nj][0] = pair[0];
      b[nj][1] = pair[1];
      b[nj + 1][0] = pair[2];
      b[nj + 1][1] = pair[3];
    }
    for (int mi = 0; mi < 2; ++mi)
      for (int nj = 0; nj < 4; ++nj) emmy_mma_m16n8k16<T>(acc[mi][nj], a[mi], b[nj]);
    __syncthreads();
  }
  const int g = lane / 4, t = lane % 4;
  for (int mi = 0; mi < 2; ++mi)
    for (int nj = 0; nj < 4; ++nj) {
      const int64_t r = row0 + wm + mi * 16 + g, c = col0 + wn + nj * 8 + 2 * t;
      C[r * N + c] = acc[mi][nj][0];
      C[r * N + c + 1] = acc[mi][nj][1];
      C[(r + 8) * N + c] = acc[mi][nj][2];
      C[(r + 8) * N + c + 1] = acc[mi][nj][3];
    }
}

__global__ void matmul_f16_k0(const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C,
                              int64_t N, int64_t K) {
  matmul_body(A, B, C, N, K);
}
__global__ void matmul_bf16_k0(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B,
                               float* __restrict__ C, int64_t N, int64_t K) {
  matmul_body(A, B, C, N, K);
}

extern "C" int matmul_f16(const __half* A, const __half* B, float* C, int64_t M, int64_t N, int64_t K,
                          cudaStream_t stream) {
  EMMY_LAUNCH(matmul_f16_k0, dim3((unsigned)(N / 64), (unsigned)(M / 64)), dim3(128), stream, A, B, C, N, K);
  return check_launch();
}
extern "C" int matmul_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C, int64_t M, int64_t N, int64_t K,
                           cudaStream_t stream) {
  EMMY_LAUNCH(matmul_bf16_k0, dim3((unsigned)(N / 64), (unsigned)(M / 64)), dim3(128), stream, A, B, C, N, K);
  return check_launch();
}

// --- Reports ------------------------------------------------------------------------------------------

// Each thread writes row t of the tile (8 elements), then the warp loads the 32 rows with ldmatrix.x4,
// lane t passing row `shift` rows further on: with shift 0 every lane reads what it wrote itself.
__global__ void ldmatrix_race_k0(int barrier, int shift, uint32_t* __restrict__ out) {
  EMMY_SHARED(__half, tile, 256);
  for (int i = 0; i < 8; ++i) tile[threadIdx.x * 8 + i] = __ushort_as_half((unsigned short)(threadIdx.x * 8 + i));
  if (barrier) __syncthreads();
  uint32_t fragment[4];
  emmy_ldmatrix<4, false>(fragment, tile, (threadIdx.x + shift) % 32 * 8);
  out[threadIdx.x] = fragment[0] ^ fragment[1] ^ fragment[2] ^ fragment[3];
}

// After a barrier, lane t reads row t+1 with ldmatrix, then writes its own row: a write to a row that
// another lane read. Lane 31 released the barrier and reached ldmatrix first, so lane 30 arrives last
// and goes on first: its write is the one reported.
__global__ void ldmatrix_then_write_k0(void) {
  EMMY_SHARED(__half, tile, 256);
  for (int i = 0; i < 8; ++i) tile[threadIdx.x * 8 + i] = __ushort_as_half(0);
  __syncthreads();
  uint32_t fragment[4];
  emmy_ldmatrix<4, false>(fragment, tile, (threadIdx.x + 1) % 32 * 8);
  tile[threadIdx.x * 8] = __ushort_as_half((unsigned short)fragment[0]);
}

// Lane 5 passes a row that starts 8 bytes into a 16-byte unit; lane 31 one past the end of the tile.
__global__ void ldmatrix_misaligned_k0(void) {
  EMMY_SHARED(__half, tile, 256);
  uint32_t fragment[4];
  emmy_ldmatrix<4, false>(fragment, tile, threadIdx.x * 8 + (threadIdx.x == 5 ? 4 : 0));
}
__global__ void ldmatrix_out_of_bounds_k0(void) {
  EMMY_SHARED(__half, tile, 256);
  uint32_t fragment[4];
  emmy_ldmatrix<4, true>(fragment, tile, threadIdx.x == 31 ? 256 : threadIdx.x * 8);
}

// A block of 48 threads: its second warp has 16 lanes.
__global__ void mma_partial_warp_k0(float* __restrict__ out) {
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float d[4] = {0, 0, 0, 0};
  emmy_mma_m16n8k16<__half>(d, a, b);
  out[threadIdx.x] = d[0];
}

__global__ void ldmatrix_exited_k0(void) {
  EMMY_SHARED(__half, tile, 256);
  if (threadIdx.x >= 16) return;
  uint32_t fragment[2];
  emmy_ldmatrix<2, false>(fragment, tile, threadIdx.x * 8);
}

__global__ void mma_or_shuffle_k0(float* __restrict__ out) {
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  float d[4] = {0, 0, 0, 0};
  if (threadIdx.x < 16)
    emmy_mma_m16n8k16<__nv_bfloat16>(d, a, b);
  else
    d[0] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
  out[threadIdx.x] = d[0];
}

__global__ void ldmatrix_mixed_k0(uint32_t* __restrict__ out) {
  EMMY_SHARED(__half, tile, 256);
  uint32_t fragment[4] = {0, 0, 0, 0};
  if (threadIdx.x < 16)
    emmy_ldmatrix<4, false>(fragment, tile, threadIdx.x * 8);
  else
    emmy_ldmatrix<4, true>(fragment, tile, threadIdx.x * 8);
  out[threadIdx.x] = fragment[0];
}

__global__ void barrier_or_ldmatrix_k0(void) {
  EMMY_SHARED(__half, tile, 256);
  uint32_t fragment[1];
  if (threadIdx.x < 32)
    __syncthreads();
  else if (threadIdx.x < 48)
    emmy_ldmatrix<1, false>(fragment, tile, threadIdx.x % 32 * 8);
}

extern "C" int ldmatrix_race(int barrier, int shift, uint32_t* out, cudaStream_t stream) {
  EMMY_LAUNCH(ldmatrix_race_k0, dim3(1), dim3(32), stream, barrier, shift, out);
  return check_launch();
}
extern "C" int ldmatrix_then_write(cudaStream_t stream) {
  EMMY_LAUNCH(ldmatrix_then_write_k0, dim3(1), dim3(32), stream);
  return check_launch();
}
extern "C" int ldmatrix_misaligned(cudaStream_t stream) {
  EMMY_LAUNCH(ldmatrix_misaligned_k0, dim3(1), dim3(32), stream);
  return check_launch();
}
extern "C" int ldmatrix_out_of_bounds(cudaStream_t stream) {
  EMMY_LAUNCH(ldmatrix_out_of_bounds_k0, dim3(1), dim3(32), stream);
  return check_launch();
}
extern "C" int mma_partial_warp(float* out, cudaStream_t stream) {
  EMMY_LAUNCH(mma_partial_warp_k0, dim3(1), dim3(48), stream, out);
  return check_launch();
}
extern "C" int ldmatrix_exited(cudaStream_t stream) {
  EMMY_LAUNCH(ldmatrix_exited_k0, dim3(1), dim3(32), stream);
  return check_launch();
}
extern "C" int mma_or_shuffle(float* out, cudaStream_t stream) {
  EMMY_LAUNCH(mma_or_shuffle_k0, dim3(1), dim3(32), stream, out);
  return check_launch();
}
extern "C" int ldmatrix_mixed(uint32_t* out, cudaStream_t stream) {
  EMMY_LAUNCH(ldmatrix_mixed_k0, dim3(1), dim3(32), stream, out);
  return check_launch();
}
extern "C" int barrier_or_ldmatrix(cudaStream_t stream) {
  EMMY_LAUNCH(barrier_or_ldmatrix_k0, dim3(1), dim3(64), stream);
  return check_launch();
}
