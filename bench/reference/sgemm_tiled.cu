// The f32 product baseline: C = A B (row-major A[M, K], B[K, N], C[M, N]) as the fast SGEMM kernels
// are built. A block of 256 threads computes a 128 x 128 tile of C, 8 x 8 elements per thread in
// registers, over slices of 8 along K: each slice of A and B is read from memory in 16-byte vectors (4
// sectors per request) into shared memory, A transposed with a pad that keeps its stores free of bank
// conflicts, and then every thread reads, per k, 8 values of A (broadcast to the 16 threads of its row)
// and 2 vectors of B (a quarter warp's 128 bytes each), for 64 multiply-adds. `emmy check --profile`
// profiles it beside the standard library's matmul<f32> (CPU simulation). Hand-written CUDA: it compiles
// with nvcc, NVRTC and the simulation header (backend/sim/emmy_cuda_sim.h) alike.
#ifdef __CUDACC_RTC__
typedef long long int64_t;
#else
#include <stdint.h>
#endif
#ifndef EMMY_SHARED
#define EMMY_SHARED(type, name, count) __shared__ __align__(16) type name[count]
#endif

#define REFERENCE_TILE 128
#define REFERENCE_SLICE 8
#define REFERENCE_PAD 4  // A's rows in shared memory are 132 floats: its transposing stores hit 32 banks

#ifndef EMMY_HOST_ONLY  // the kernel, for NVRTC and the simulation (not the GPU harness's host compile)
// Elements first to first + 3 of a row of `length`, those past its end as 0: one 16-byte load when the
// row's length keeps every row's vectors aligned and all four are inside.
__device__ __forceinline__ float4 reference_load4(const float* row, int64_t first, int64_t length) {
  if (length % 4 == 0 && first + 3 < length) return *reinterpret_cast<const float4*>(&row[first]);
  float4 values = {0.0f, 0.0f, 0.0f, 0.0f};
  if (first < length) values.x = row[first];
  if (first + 1 < length) values.y = row[first + 1];
  if (first + 2 < length) values.z = row[first + 2];
  if (first + 3 < length) values.w = row[first + 3];
  return values;
}

extern "C" __global__ void __launch_bounds__(256) reference_sgemm_tiled(const float* __restrict__ a, const float* __restrict__ b,
                                                                        float* __restrict__ c, int64_t M, int64_t N, int64_t K) {
  EMMY_SHARED(float, a_slice, REFERENCE_SLICE * (REFERENCE_TILE + REFERENCE_PAD));  // [k][m]
  EMMY_SHARED(float4, b_slice, REFERENCE_SLICE * REFERENCE_TILE / 4);             // [k][n / 4]
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const int64_t m0 = (int64_t)blockIdx.y * REFERENCE_TILE, n0 = (int64_t)blockIdx.x * REFERENCE_TILE;
  // What each thread copies per slice: 4 consecutive k of one row of A, 4 consecutive n of one row of B.
  const int a_row = t / 2, a_k = (t % 2) * 4, b_k = t / 32, b_n = (t % 32) * 4;
  float sum[8][8] = {};
  for (int64_t k0 = 0; k0 < K; k0 += REFERENCE_SLICE) {
    const int64_t am = m0 + a_row, bk = k0 + b_k;
    const float4 av = am < M ? reference_load4(&a[am * K], k0 + a_k, K) : float4{0.0f, 0.0f, 0.0f, 0.0f};
    const float4 bv = bk < K ? reference_load4(&b[bk * N], n0 + b_n, N) : float4{0.0f, 0.0f, 0.0f, 0.0f};
    __syncthreads();  // the previous slice is read by everyone
    const int stride = REFERENCE_TILE + REFERENCE_PAD;
    a_slice[(a_k + 0) * stride + a_row] = av.x;
    a_slice[(a_k + 1) * stride + a_row] = av.y;
    a_slice[(a_k + 2) * stride + a_row] = av.z;
    a_slice[(a_k + 3) * stride + a_row] = av.w;
    b_slice[b_k * (REFERENCE_TILE / 4) + b_n / 4] = bv;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < REFERENCE_SLICE; ++k) {
      float as[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        as[i] = a_slice[k * stride + ty * 4 + i];
        as[4 + i] = a_slice[k * stride + 64 + ty * 4 + i];
      }
      const float4 b_low = b_slice[k * (REFERENCE_TILE / 4) + tx], b_high = b_slice[k * (REFERENCE_TILE / 4) + 16 + tx];
      const float bs[8] = {b_low.x, b_low.y, b_low.z, b_low.w, b_high.x, b_high.y, b_high.z, b_high.w};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j) sum[i][j] += as[i] * bs[j];
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int64_t m = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
    if (m >= M) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t n = n0 + half * 64 + tx * 4;
      const float* part = &sum[i][half * 4];
      if (n + 3 < N && N % 4 == 0) {
        const float4 vector = {part[0], part[1], part[2], part[3]};
        *reinterpret_cast<float4*>(&c[m * N + n]) = vector;
      } else {
        for (int j = 0; j < 4; ++j)
          if (n + j < N) c[m * N + n + j] = part[j];
      }
    }
  }
}
#endif

#ifndef __CUDACC_RTC__
// c = a b for row-major a[M, K], b[K, N], c[M, N].
static int reference_sgemm(const float* a, const float* b, float* c, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  if (M == 0 || N == 0) return 0;
  EMMY_LAUNCH(reference_sgemm_tiled, dim3((unsigned)((N + REFERENCE_TILE - 1) / REFERENCE_TILE), (unsigned)((M + REFERENCE_TILE - 1) / REFERENCE_TILE)),
              dim3(256), stream, a, b, c, M, N, K);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
#endif
