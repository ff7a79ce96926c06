// Simulation test: __half and __nv_bfloat16 as storage, their conversions from float and double and to
// float, and their arithmetic operators.
#include "standalone.h"

__global__ void narrow_k0(const float* __restrict__ in, __half* __restrict__ halves, __nv_bfloat16* __restrict__ bf16s,
                          int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    halves[i] = __float2half_rn(in[i]);
    bf16s[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void narrow_double_k0(const double* __restrict__ in, __half* __restrict__ halves,
                                 __nv_bfloat16* __restrict__ bf16s, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    halves[i] = __double2half(in[i]);
    bf16s[i] = __double2bfloat16(in[i]);
  }
}

__global__ void widen_k0(const __half* __restrict__ halves, const __nv_bfloat16* __restrict__ bf16s,
                         float* __restrict__ from_half, float* __restrict__ from_bf16, int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    from_half[i] = __half2float(halves[i]);
    from_bf16[i] = __bfloat162float(bf16s[i]);
  }
}

// One thread per result; the operands pass through shared memory, as 16-bit storage.
__global__ void arithmetic_k0(unsigned short* __restrict__ bits) {
  __shared__ __half halves[4];
  __shared__ __nv_bfloat16 bf16s[3];
  if (threadIdx.x == 0) {
    halves[0] = __half(1.0f);
    halves[1] = __half(0.00048828125f);  // 2^-11: 1 + 2^-11 is halfway between two halves
    halves[2] = __half(3.0f);
    halves[3] = __half(65504.0f);
    bf16s[0] = __nv_bfloat16(1.0f);
    bf16s[1] = __nv_bfloat16(0.00390625f);  // 2^-8: 1 + 2^-8 is halfway between two bfloat16s
    bf16s[2] = __nv_bfloat16(3.0f);
  }
  __syncthreads();
  __half h = halves[2];
  switch (threadIdx.x) {
    case 0: bits[0] = __half_as_ushort(halves[0] + halves[1]); break;
    case 1: bits[1] = __half_as_ushort(halves[0] + halves[1] * halves[2]); break;
    case 2: bits[2] = __half_as_ushort(halves[3] * __half(2.0f)); break;
    case 3: bits[3] = __half_as_ushort(halves[0] / halves[2]); break;
    case 4: bits[4] = __half_as_ushort(-halves[2]); break;
    case 5: bits[5] = __bfloat16_as_ushort(bf16s[0] + bf16s[1]); break;
    case 6: bits[6] = __bfloat16_as_ushort(bf16s[0] / bf16s[2]); break;
    case 7: bits[7] = (halves[0] < halves[2]) && (bf16s[2] >= bf16s[2]) && !(halves[0] == halves[2]); break;
    case 8:
      h += __half(0.5f);
      bits[8] = __half_as_ushort(h);
      break;
    case 9: bits[9] = __half_as_ushort(__floats2half2_rn(1.0f, -2.0f).y); break;
    case 10: bits[10] = __half_as_ushort(__half(70000)); break;
    case 11:
      bits[11] =
          __bfloat16_as_ushort(__floats2bfloat162_rn(__bfloat1622float2(make_bfloat162(bf16s[2], bf16s[0])).x, 0.0f).x);
      break;
  }
}

static int check_launch(void) {
  const cudaError_t error = cudaGetLastError();
  if (error == cudaSuccess) return 0;
  snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
  return 1;
}

extern "C" int narrow(const float* in, __half* halves, __nv_bfloat16* bf16s, int64_t n, cudaStream_t stream) {
  EMMY_LAUNCH(narrow_k0, dim3(64), dim3(256), stream, in, halves, bf16s, n);
  return check_launch();
}

extern "C" int narrow_double(const double* in, __half* halves, __nv_bfloat16* bf16s, int64_t n, cudaStream_t stream) {
  EMMY_LAUNCH(narrow_double_k0, dim3(1), dim3(32), stream, in, halves, bf16s, n);
  return check_launch();
}

extern "C" int widen(const __half* halves, const __nv_bfloat16* bf16s, float* from_half, float* from_bf16, int64_t n,
                     cudaStream_t stream) {
  EMMY_LAUNCH(widen_k0, dim3(64), dim3(256), stream, halves, bf16s, from_half, from_bf16, n);
  return check_launch();
}

extern "C" int arithmetic(unsigned short* bits, cudaStream_t stream) {
  EMMY_LAUNCH(arithmetic_k0, dim3(1), dim3(12), stream, bits);
  return check_launch();
}
