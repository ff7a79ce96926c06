// Simulation test: 16-byte vector loads and stores through reinterpret_cast<const float4*>, with a
// scalar tail, as the backend emits for contiguous elementwise work.
#include "standalone.h"

static_assert(sizeof(float4) == 16 && alignof(float4) == 16, "float4 is 16 bytes, 16-byte aligned");
static_assert(sizeof(double2) == 16 && alignof(double2) == 16, "double2 is 16 bytes, 16-byte aligned");
static_assert(sizeof(int4) == 16 && alignof(int4) == 16, "int4 is 16 bytes, 16-byte aligned");
static_assert(sizeof(uint4) == 16 && alignof(uint4) == 16, "uint4 is 16 bytes, 16-byte aligned");
static_assert(sizeof(float2) == 8 && alignof(float2) == 8, "float2 is 8 bytes, 8-byte aligned");
static_assert(sizeof(int2) == 8 && alignof(int2) == 8, "int2 is 8 bytes, 8-byte aligned");
static_assert(sizeof(__half2) == 4 && alignof(__half2) == 4, "__half2 is 4 bytes, 4-byte aligned");
static_assert(sizeof(__nv_bfloat162) == 4 && alignof(__nv_bfloat162) == 4, "__nv_bfloat162 is 4 bytes, 4-byte aligned");

__global__ void scale_vec4_k0(const float* __restrict__ x, float* __restrict__ y, float alpha, int64_t n) {
  const int64_t vectors = n / 4;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < vectors) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    reinterpret_cast<float4*>(y)[i] = make_float4(alpha * v.x, alpha * v.y, alpha * v.z, alpha * v.w);
  }
  const int64_t tail = vectors * 4 + i;
  if (tail < n) y[tail] = alpha * x[tail];
}

extern "C" int scale_vec4(const float* x, float* y, float alpha, int64_t n, cudaStream_t stream) {
  const int64_t threads = (n / 4 > 3 ? n / 4 : 3);
  EMMY_LAUNCH(scale_vec4_k0, dim3((unsigned)((threads + 127) / 128)), dim3(128), stream, x, y, alpha, n);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) {
    snprintf(emmy_last_error_text, sizeof emmy_last_error_text, "%s", cudaGetErrorString(error));
    return 1;
  }
  return 0;
}
