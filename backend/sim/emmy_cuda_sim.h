// Emmy's CUDA-on-CPU simulation, used by `emmy check`.
//
// A generated `.cu` file is compiled as host C++ with this header force-included:
//   c++ -std=c++17 -O1 -DEMMY_SIMULATE -include emmy_cuda_sim.h -x c++ K.cu harness.cpp
// and its host function runs every kernel on the CPU with real block semantics:
//   - blocks run one after another (x, then y, then z), synchronously inside EMMY_LAUNCH;
//   - the threads of a block are user-level fibers on one OS thread, scheduled round-robin in linear
//     thread order, switching only at __syncthreads(), at warp shuffles (and the tensor-core built-ins
//     emmy_ldmatrix and emmy_mma_m16n8k16, warp-collective too) and when a thread finishes;
//   - __syncthreads() waits for every thread of the block, a shuffle for every lane of the warp. When
//     nothing can run any more but some threads wait, the launch stops with a deadlock report naming the
//     kernel, the block and a waiting thread (cudaGetLastError / cudaGetErrorString), and the rest of
//     the grid is skipped. Nothing hangs and the process goes on.
//   - the same happens, with a report naming the kernel, the buffer, the thread and the block, at a data
//     race on a shared array declared with EMMY_SHARED (two threads access an element between barriers,
//     at least one of them writing), at an index out of its bounds, and at an access past a global
//     buffer from cudaMalloc (which lies between guard pages) or any other fault in a kernel.
// Read backend/sim/ARCHITECTURE.md for the design and its limits (stack size, what is not simulated).
//
// This file is self-contained (C++17 standard library and POSIX only) because it is compiled in a
// temporary folder next to the generated code. It is included by every translation unit of the
// harness, so everything here is inline (but for the scheduler's functions, which a program may link
// instead: EMMY_SIM_LINKED_RUNTIME, below).
#pragma once

// math.h (not only cmath) puts the float overloads, exp(float) and so on, in the global namespace, where
// CUDA has them.
#include <math.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(EMMY_PROFILE)  // the profiler's containers
#include <map>
#include <tuple>
#include <unordered_set>
#endif

// A hand-written context switch (a few pushes and a stack-pointer swap) makes a softmax simulate eight
// times faster than swapcontext, which makes a system call to save the signal mask. It is x86-64 only,
// and it cannot work with CET shadow stacks, so everything else (or -DEMMY_SIM_USE_UCONTEXT) takes the
// portable way.
#if defined(__x86_64__) && defined(__ELF__) && !defined(EMMY_SIM_USE_UCONTEXT) && !(defined(__CET__) && (__CET__ & 2))
#define EMMY_SIM_STACK_SWITCH 1
#else
#include <ucontext.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define EMMY_SIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMMY_SIM_ASAN 1
#endif
#endif
#if EMMY_SIM_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// Each simulated thread runs on its own stack of this size (below it, a guard page turns an overflow
// into a crash instead of silent corruption). Generated kernels keep a few hundred bytes of locals;
// raise it with -DEMMY_SIM_STACK_BYTES=... for hand-written kernels with large local arrays.
#ifndef EMMY_SIM_STACK_BYTES
#define EMMY_SIM_STACK_BYTES (64 * 1024)
#endif

// ---------------------------------------------------------------------------------------------------
// CUDA qualifiers
// ---------------------------------------------------------------------------------------------------

#define __global__
#define __device__
#define __host__
// Inlined as on the GPU when profiling, so that the accesses of the .cu's helpers (emmy_copy_async_lanes)
// are counted at the kernel line that calls them; a plain inline otherwise, which compiles faster.
#if defined(EMMY_PROFILE)
#define __forceinline__ inline __attribute__((always_inline))
#else
#define __forceinline__ inline
#endif
#define __launch_bounds__(...)
// A block's threads are fibers of one OS thread and blocks run one after another, so a static local is
// exactly what shared memory is: one copy per block, seen by all its threads (and, like shared memory,
// not cleared between blocks). `__restrict__` needs nothing: GCC and Clang know it.
#define __shared__ static
// Generated code declares its shared arrays with EMMY_SHARED (its prelude defines it as
// `__shared__ type name[count]` for the GPU). Here the array is a static local too, whose elements
// record who accessed them since the last barrier, so that a data race or an index out of bounds is
// reported (SharedArray, below).
#define EMMY_SHARED(type, name, count) static ::emmy_sim::detail::SharedArray<type, (count)> name{#name, {}, {}}
// A shared array sized at launch is one of its most elements, checked against what this launch sized: its
// `elements` from byte `offset` must lie within the bytes the launch gave (EMMY_LAUNCH_SIZED).
#define EMMY_SHARED_SIZED_AT_LAUNCH(type, name, count, offset, elements) \
  EMMY_SHARED(type, name, count);                                       \
  name.sizeAtLaunch((offset), (elements))
// `#pragma unroll` is CUDA's; GCC would warn about it under -Wall (Clang knows it).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
#endif

// ---------------------------------------------------------------------------------------------------
// Index and vector types, with CUDA's alignment (16-byte types must be 16-byte aligned for the
// reinterpret_cast<const float4*> loads of generated code to mean what they mean on the GPU)
// ---------------------------------------------------------------------------------------------------

struct uint3 {
  unsigned int x, y, z;
};

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

struct alignas(8) float2 {
  float x, y;
};
struct float3 {
  float x, y, z;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) double2 {
  double x, y;
};
struct alignas(8) int2 {
  int x, y;
};
struct int3 {
  int x, y, z;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};

inline float2 make_float2(float x, float y) { return {x, y}; }
inline float3 make_float3(float x, float y, float z) { return {x, y, z}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }
inline int2 make_int2(int x, int y) { return {x, y}; }
inline int3 make_int3(int x, int y, int z) { return {x, y, z}; }
inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return {x, y, z}; }
inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return {x, y, z, w}; }

constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------------
// __half and __nv_bfloat16: 16-bit storage, converted exactly as CUDA converts (round to nearest even;
// a NaN becomes the canonical 0x7fff). Arithmetic goes through float and rounds once, which gives the
// same bits as the GPU's half-precision + - * /: float has more than twice the bits of either format
// plus two, so the float result rounded again is the correctly rounded 16-bit result.
// ---------------------------------------------------------------------------------------------------

namespace emmy_sim::detail {

inline uint64_t bitsOfDouble(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float floatOfBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// The bits of `value` rounded to the nearest number of the binary format with `ExponentBits` and
// `MantissaBits`, ties to even. One function serves both formats and both float and double sources
// (a float converts to double exactly), and rounding once from the source avoids double rounding.
template <int ExponentBits, int MantissaBits>
inline uint16_t roundToNarrowFloat(double value) {
  constexpr int kBias = (1 << (ExponentBits - 1)) - 1;
  constexpr int kMinNormalExponent = 1 - kBias;
  constexpr uint16_t kInfinity = ((1u << ExponentBits) - 1) << MantissaBits;
  constexpr uint16_t kCanonicalNaN = 0x7fff;

  const uint64_t bits = bitsOfDouble(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 48) & 0x8000u);
  const int biasedExponent = static_cast<int>((bits >> 52) & 0x7ff);
  const uint64_t fraction = bits & ((uint64_t{1} << 52) - 1);
  if (biasedExponent == 0x7ff) return fraction != 0 ? kCanonicalNaN : sign | kInfinity;
  if (biasedExponent == 0) return sign;  // double subnormals lie far below either format's range
  const int exponent = biasedExponent - 1023;
  if (exponent > kBias) return sign | kInfinity;

  // The 53-bit significand (leading 1 included) loses the bits the target cannot hold: 52 - MantissaBits
  // of them for a normal result, more for a subnormal one.
  const uint64_t significand = fraction | (uint64_t{1} << 52);
  const int shift = 52 - MantissaBits + (exponent < kMinNormalExponent ? kMinNormalExponent - exponent : 0);
  if (shift > 53) return sign;  // less than half the smallest subnormal
  uint64_t kept = significand >> shift;
  const uint64_t dropped = significand & ((uint64_t{1} << shift) - 1);
  const uint64_t halfway = uint64_t{1} << (shift - 1);
  if (dropped > halfway || (dropped == halfway && (kept & 1) != 0)) ++kept;
  if (exponent < kMinNormalExponent) return sign | static_cast<uint16_t>(kept);  // may round up to the smallest normal
  // `kept` still holds the leading 1, which adds one to the exponent field (hence the - 1); a carry out
  // of the mantissa moves on into the exponent, up to infinity, as rounding should.
  return sign | static_cast<uint16_t>((static_cast<uint64_t>(exponent + kBias - 1) << MantissaBits) + kept);
}

inline float halfBitsToFloat(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) return mantissa != 0 ? floatOfBits(0x7fffffffu) : floatOfBits(sign | 0x7f800000u);
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  return floatOfBits(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

// bfloat16 is the upper half of a float.
inline float bfloat16BitsToFloat(uint16_t bits) { return floatOfBits(static_cast<uint32_t>(bits) << 16); }

}  // namespace emmy_sim::detail

struct alignas(2) __half {
  __half() = default;  // trivial, so that `__shared__ __half buf[N]` is a plain static array
  __half(float value) : __x(emmy_sim::detail::roundToNarrowFloat<5, 10>(value)) {}
  __half(double value) : __x(emmy_sim::detail::roundToNarrowFloat<5, 10>(value)) {}
  template <class Integer, std::enable_if_t<std::is_integral_v<Integer>, int> = 0>
  __half(Integer value) : __half(static_cast<double>(value)) {}
  operator float() const { return emmy_sim::detail::halfBitsToFloat(__x); }
  unsigned short __x;
};

struct alignas(2) __nv_bfloat16 {
  __nv_bfloat16() = default;
  __nv_bfloat16(float value) : __x(emmy_sim::detail::roundToNarrowFloat<8, 7>(value)) {}
  __nv_bfloat16(double value) : __x(emmy_sim::detail::roundToNarrowFloat<8, 7>(value)) {}
  template <class Integer, std::enable_if_t<std::is_integral_v<Integer>, int> = 0>
  __nv_bfloat16(Integer value) : __nv_bfloat16(static_cast<double>(value)) {}
  operator float() const { return emmy_sim::detail::bfloat16BitsToFloat(__x); }
  unsigned short __x;
};

// The operators CUDA declares for its 16-bit types. Like CUDA's, they take two operands of the type, so
// mixing with float (`h + 1.0f`) is as ambiguous here as it is for nvcc.
#define EMMY_SIM_NARROW_FLOAT_OPERATORS(T)                                                    \
  inline T operator+(T a, T b) { return T(static_cast<float>(a) + static_cast<float>(b)); }   \
  inline T operator-(T a, T b) { return T(static_cast<float>(a) - static_cast<float>(b)); }   \
  inline T operator*(T a, T b) { return T(static_cast<float>(a) * static_cast<float>(b)); }   \
  inline T operator/(T a, T b) { return T(static_cast<float>(a) / static_cast<float>(b)); }   \
  inline T& operator+=(T& a, T b) { return a = a + b; }                                       \
  inline T& operator-=(T& a, T b) { return a = a - b; }                                       \
  inline T& operator*=(T& a, T b) { return a = a * b; }                                       \
  inline T& operator/=(T& a, T b) { return a = a / b; }                                       \
  inline T operator+(T a) { return a; }                                                       \
  inline T operator-(T a) {                                                                   \
    a.__x ^= 0x8000u; /* a sign flip, NaN included, as the GPU's negation */                  \
    return a;                                                                                 \
  }                                                                                           \
  inline bool operator==(T a, T b) { return static_cast<float>(a) == static_cast<float>(b); } \
  inline bool operator!=(T a, T b) { return static_cast<float>(a) != static_cast<float>(b); } \
  inline bool operator<(T a, T b) { return static_cast<float>(a) < static_cast<float>(b); }   \
  inline bool operator>(T a, T b) { return static_cast<float>(a) > static_cast<float>(b); }   \
  inline bool operator<=(T a, T b) { return static_cast<float>(a) <= static_cast<float>(b); } \
  inline bool operator>=(T a, T b) { return static_cast<float>(a) >= static_cast<float>(b); }
EMMY_SIM_NARROW_FLOAT_OPERATORS(__half)
EMMY_SIM_NARROW_FLOAT_OPERATORS(__nv_bfloat16)
#undef EMMY_SIM_NARROW_FLOAT_OPERATORS

struct alignas(4) __half2 {
  __half x, y;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline __half __float2half_rn(float value) { return __half(value); }
inline __half __float2half(float value) { return __half(value); }
inline __half __double2half(double value) { return __half(value); }
inline float __half2float(__half value) { return static_cast<float>(value); }
inline __nv_bfloat16 __float2bfloat16_rn(float value) { return __nv_bfloat16(value); }
inline __nv_bfloat16 __float2bfloat16(float value) { return __nv_bfloat16(value); }
inline __nv_bfloat16 __double2bfloat16(double value) { return __nv_bfloat16(value); }
inline float __bfloat162float(__nv_bfloat16 value) { return static_cast<float>(value); }

inline unsigned short __half_as_ushort(__half value) { return value.__x; }
inline __half __ushort_as_half(unsigned short bits) {
  __half value;
  value.__x = bits;
  return value;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 value) { return value.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) {
  __nv_bfloat16 value;
  value.__x = bits;
  return value;
}

inline __half2 make_half2(__half x, __half y) { return {x, y}; }
inline __half2 __floats2half2_rn(float x, float y) { return {__half(x), __half(y)}; }
inline float2 __half22float2(__half2 value) { return {static_cast<float>(value.x), static_cast<float>(value.y)}; }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 x, __nv_bfloat16 y) { return {x, y}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float x, float y) { return {__nv_bfloat16(x), __nv_bfloat16(y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 value) {
  return {static_cast<float>(value.x), static_cast<float>(value.y)};
}

// ---------------------------------------------------------------------------------------------------
// Math. The C library provides expf ... fmodf and, through math.h, the float and double overloads.
// The GPU's expf etc. may differ from the host's in the last bit or two; `emmy check` compares with a
// tolerance. The fast intrinsics (__expf ...) are the accurate functions here.
// ---------------------------------------------------------------------------------------------------

inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }

// CUDA's min and max: same-type overloads for the integer types, fminf/fmaxf for floating point.
#define EMMY_SIM_MIN_MAX(T)                        \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
EMMY_SIM_MIN_MAX(int)
EMMY_SIM_MIN_MAX(unsigned int)
EMMY_SIM_MIN_MAX(long)
EMMY_SIM_MIN_MAX(unsigned long)
EMMY_SIM_MIN_MAX(long long)
EMMY_SIM_MIN_MAX(unsigned long long)
#undef EMMY_SIM_MIN_MAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

// The threads of a block run one at a time and never switch inside an atomic, so a plain
// read-modify-write is atomic; blocks do not overlap either.
namespace emmy_sim::detail {
template <class T>
inline T fetchAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
template <class T, class Combine>
inline T fetchCombine(T* address, T value, Combine combine) {
  const T old = *address;
  *address = combine(old, value);
  return old;
}
}  // namespace emmy_sim::detail
// A 32-bit sum wraps, as on the GPU.
inline int atomicAdd(int* address, int value) {
  return emmy_sim::detail::fetchCombine(address, value, [](int a, int b) {
    return static_cast<int>(static_cast<unsigned int>(a) + static_cast<unsigned int>(b));
  });
}
#define EMMY_SIM_ATOMIC_MIN_MAX(T)                                                                                  \
  inline T atomicMax(T* address, T value) {                                                                          \
    return emmy_sim::detail::fetchCombine(address, value, [](T a, T b) { return a < b ? b : a; });                 \
  }                                                                                                                  \
  inline T atomicMin(T* address, T value) {                                                                          \
    return emmy_sim::detail::fetchCombine(address, value, [](T a, T b) { return b < a ? b : a; });                 \
  }
EMMY_SIM_ATOMIC_MIN_MAX(int)
EMMY_SIM_ATOMIC_MIN_MAX(unsigned int)
EMMY_SIM_ATOMIC_MIN_MAX(long long)
EMMY_SIM_ATOMIC_MIN_MAX(unsigned long long)
#undef EMMY_SIM_ATOMIC_MIN_MAX
inline unsigned int atomicAdd(unsigned int* address, unsigned int value) {
  return emmy_sim::detail::fetchAdd(address, value);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  return emmy_sim::detail::fetchAdd(address, value);
}
inline float atomicAdd(float* address, float value) { return emmy_sim::detail::fetchAdd(address, value); }
inline double atomicAdd(double* address, double value) { return emmy_sim::detail::fetchAdd(address, value); }

// ---------------------------------------------------------------------------------------------------
// Host API: errors are kept as the runtime keeps them. cudaGetErrorString returns the detailed text of
// the last failure (the deadlock report, the invalid launch) for its code, the generic text otherwise.
// ---------------------------------------------------------------------------------------------------

typedef struct CUstream_st* cudaStream_t;

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;

namespace emmy_sim::detail {
inline cudaError_t lastError = cudaSuccess;
inline cudaError_t describedError = cudaSuccess;
inline std::string errorDescription;

inline void recordError(cudaError_t error, std::string description) {
  lastError = error;
  describedError = error;
  errorDescription = std::move(description);
}
}  // namespace emmy_sim::detail

inline cudaError_t cudaGetLastError() {
  const cudaError_t error = emmy_sim::detail::lastError;
  emmy_sim::detail::lastError = cudaSuccess;
  return error;
}

inline cudaError_t cudaPeekAtLastError() { return emmy_sim::detail::lastError; }

// Device memory is host memory, each allocation mapped on its own between two inaccessible guard pages:
// its end lies as close to the page after it as a 16-byte aligned start allows (the alignment of
// cudaMalloc that vector accesses need, kept so that the simulation takes the same paths as the GPU), so
// that a kernel reading or writing past the end, or far enough before the start, faults at once and the
// fault is reported with the buffer and the thread (Scheduler::describeFault). An access less than 16
// bytes past the end of a buffer whose size is not a multiple of 16 bytes stays unseen.
namespace emmy_sim::detail {

struct GlobalAllocation {
  char* mapping;  // the leading guard page, the data pages, the trailing guard page
  size_t mappingBytes;
  char* data;
  size_t bytes;
  uint64_t serial;  // 1 for the first allocation of the program, and so on: a profile's buffer identity
};

inline std::vector<GlobalAllocation> globalAllocations;
inline uint64_t allocationsMade = 0;
// globalAllocations' elements as plain values, for the profiler's uninstrumented lookup (a vector's
// accessors would be calls, and instrumented).
inline const GlobalAllocation* allocationTable = nullptr;
inline size_t allocationCount = 0;
inline void publishAllocations() {
  allocationTable = globalAllocations.data();
  allocationCount = globalAllocations.size();
}

inline void* allocateGuarded(size_t bytes) {
  const auto page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t alignedBytes = (bytes + 15) / 16 * 16;
  const size_t dataBytes = (alignedBytes + page - 1) / page * page;
  const size_t mappingBytes = dataBytes + 2 * page;
  void* mapping = mmap(nullptr, mappingBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapping == MAP_FAILED) return nullptr;
  char* first = static_cast<char*>(mapping) + page;
  if (dataBytes > 0 && mprotect(first, dataBytes, PROT_READ | PROT_WRITE) != 0) {
    munmap(mapping, mappingBytes);
    return nullptr;
  }
  char* data = first + dataBytes - alignedBytes;
  globalAllocations.push_back({static_cast<char*>(mapping), mappingBytes, data, bytes, ++allocationsMade});
  publishAllocations();
  return data;
}

inline bool freeGuarded(void* data) {
  for (auto it = globalAllocations.begin(); it != globalAllocations.end(); ++it) {
    if (it->data != data) continue;
    munmap(it->mapping, it->mappingBytes);
    globalAllocations.erase(it);
    publishAllocations();
    return true;
  }
  return false;
}

// The allocation whose mapping, guard pages included, holds `address`.
inline const GlobalAllocation* allocationAround(const void* address) {
  const char* byte = static_cast<const char*>(address);
  for (const GlobalAllocation& allocation : globalAllocations)
    if (byte >= allocation.mapping && byte < allocation.mapping + allocation.mappingBytes) return &allocation;
  return nullptr;
}

}  // namespace emmy_sim::detail

// The stream-ordered calls happen at once, since launches are synchronous.
inline cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  *pointer = emmy_sim::detail::allocateGuarded(bytes);
  return *pointer ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void* pointer) {
  return pointer == nullptr || emmy_sim::detail::freeGuarded(pointer) ? cudaSuccess : cudaErrorInvalidValue;
}
inline cudaError_t cudaMallocAsync(void** pointer, size_t bytes, cudaStream_t) { return cudaMalloc(pointer, bytes); }
inline cudaError_t cudaFreeAsync(void* pointer, cudaStream_t) { return cudaFree(pointer); }

inline const char* cudaGetErrorString(cudaError_t error) {
  if (error != cudaSuccess && error == emmy_sim::detail::describedError)
    return emmy_sim::detail::errorDescription.c_str();
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unrecognized error code";
}

// ---------------------------------------------------------------------------------------------------
// Fibers: a context is where a suspended thread of control resumes (a saved stack pointer, or a
// ucontext), and the stack it runs on. Starting a context makes its next resumption call `entry` on a
// fresh stack.
// ---------------------------------------------------------------------------------------------------

namespace emmy_sim::detail {

#if EMMY_SIM_STACK_SWITCH
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save, loads `load`
// and pops that context's registers; the final `ret` resumes it where it switched away. Caller-saved
// registers need nothing: the compiler already assumes a call clobbers them. Weak, because every
// translation unit that includes this header emits it.
extern "C" void emmy_sim_switch_stack(void** save, void* load);
asm(R"(
  .pushsection .text
  .weak emmy_sim_switch_stack
  .type emmy_sim_switch_stack, @function
  .p2align 4
emmy_sim_switch_stack:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emmy_sim_switch_stack, .-emmy_sim_switch_stack
  .popsection
)");
#endif

struct StackBounds {
  const void* bottom = nullptr;
  size_t bytes = 0;
};

struct Context {
#if EMMY_SIM_STACK_SWITCH
  void* stackPointer = nullptr;
#else
  ucontext_t state;
  bool initialized = false;
#endif
  StackBounds stack;
  // Where the frames of its last run lie deepest (only tracked for AddressSanitizer).
  const char* deepestFrame = nullptr;
};

// Frames that never returned (a thread that exited switched away from inside them; a deadlocked one
// was abandoned in them) keep AddressSanitizer's poisoned redzones: they must be forgotten before the
// stack is used again. They lie above the deepest frame seen at a switch, give or take the switch's
// own few words.
inline void forgetFramesOfLastRun(Context& context) {
#if EMMY_SIM_ASAN
  if (context.deepestFrame == nullptr) return;
  const char* bottom = static_cast<const char*>(context.stack.bottom);
  const char* top = bottom + context.stack.bytes;
  // A thread stopped at a fault switched away from the signal stack: its whole stack is forgotten.
  const bool onItsStack = context.deepestFrame > bottom && context.deepestFrame <= top;
  const char* from = onItsStack ? std::max(bottom, context.deepestFrame - 1024) : bottom;
  ASAN_UNPOISON_MEMORY_REGION(from, static_cast<size_t>(top - from));
  context.deepestFrame = nullptr;
#else
  (void)context;
#endif
}

inline void startContext(Context& context, char* stack, size_t stackBytes, void (*entry)()) {
  forgetFramesOfLastRun(context);
  context.stack = {stack, stackBytes};
#if EMMY_SIM_STACK_SWITCH
  // The frame emmy_sim_switch_stack pops: six registers, then `entry` as the return address. Above it
  // sits entry's own return address, never used (entry never returns); it puts the stack pointer at
  // 8 mod 16 on entry, as after a call.
  auto** top = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(stack + stackBytes) & ~uintptr_t{15});
  top[-1] = nullptr;
  top[-2] = reinterpret_cast<void*>(entry);
  for (int slot = 3; slot <= 8; ++slot) top[-slot] = nullptr;
  context.stackPointer = top - 8;
#else
  // getcontext makes a system call; once per fiber, not once per block.
  if (!context.initialized) getcontext(&context.state);
  context.initialized = true;
  context.state.uc_stack.ss_sp = stack;
  context.state.uc_stack.ss_size = stackBytes;
  context.state.uc_link = nullptr;
  makecontext(&context.state, entry, 0);
#endif
}

inline void resumeContext(Context& from, Context& to) {
#if EMMY_SIM_STACK_SWITCH
  emmy_sim_switch_stack(&from.stackPointer, to.stackPointer);
#else
  swapcontext(&from.state, &to.state);
#endif
}

// AddressSanitizer (when the simulated program is built with it, to catch out-of-bounds accesses) must
// be told about every switch of stacks, or it misreads the fibers' frames.

// Switches to `to`; `from` is resumed later where it left off.
inline void switchContext(Context& from, Context& to) {
#if EMMY_SIM_ASAN
  from.deepestFrame = static_cast<const char*>(__builtin_frame_address(0));
  void* fakeStack = nullptr;
  __sanitizer_start_switch_fiber(&fakeStack, to.stack.bottom, to.stack.bytes);
  resumeContext(from, to);
  __sanitizer_finish_switch_fiber(fakeStack, nullptr, nullptr);
#else
  resumeContext(from, to);
#endif
}

// Switches to `to` for good: `from` is never resumed, only started afresh.
inline void leaveContext(Context& from, Context& to) {
#if EMMY_SIM_ASAN
  from.deepestFrame = static_cast<const char*>(__builtin_frame_address(0));
  __sanitizer_start_switch_fiber(nullptr, to.stack.bottom, to.stack.bytes);
#endif
  resumeContext(from, to);
}

// Called first thing on a started stack. Returns the stack it came from.
inline StackBounds arrivedFrom() {
  StackBounds previous;
#if EMMY_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &previous.bottom, &previous.bytes);
#endif
  return previous;
}

// A fiber stack with a guard page below it.
class FiberStack {
public:
  FiberStack() = default;
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  ~FiberStack() {
    if (mapping_ != nullptr) munmap(mapping_, mappingBytes_);
  }

  bool allocate(size_t usableBytes) {
    const size_t guardBytes = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    mappingBytes_ = guardBytes + usableBytes;
    void* mapping =
        mmap(nullptr, mappingBytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED) return false;
    mapping_ = static_cast<char*>(mapping);
    mprotect(mapping_, guardBytes, PROT_NONE);
    usable_ = mapping_ + guardBytes;
    return true;
  }

  char* usable() const { return usable_; }
  bool guardHolds(const void* address) const {
    return static_cast<const char*>(address) >= mapping_ && static_cast<const char*>(address) < usable_;
  }

private:
  char* mapping_ = nullptr;
  size_t mappingBytes_ = 0;
  char* usable_ = nullptr;
};

// ---------------------------------------------------------------------------------------------------
// The block scheduler
// ---------------------------------------------------------------------------------------------------

// What the running thread sees as threadIdx, blockIdx, blockDim and gridDim.
inline uint3 currentThreadIdx;
inline uint3 currentBlockIdx;
inline dim3 currentBlockDim;
inline dim3 currentGridDim;

// AtShuffle: in a warp rendezvous, a shuffle or another warp-collective operation (ldmatrix, mma).
enum class ThreadState : uint8_t { Runnable, AtBarrier, AtShuffle, Exited };
enum class ShuffleMode : uint8_t { Index, Up, Down, Xor };

constexpr unsigned kWarpSize = 32;

// printf into a string: a report takes few instructions this way, which keeps the header quick to
// compile.
__attribute__((format(printf, 1, 2))) inline std::string formatted(const char* format, ...) {
  char text[1024];
  va_list arguments;
  va_start(arguments, format);
  std::vsnprintf(text, sizeof text, format, arguments);
  va_end(arguments);
  return text;
}

inline std::string coordinates(dim3 d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

// The lane a shuffle reads, by the PTX definition of shfl.sync with the segment mask CUDA derives from
// `width`: up reads below within the segment, down and xor read up to the end of the segment, and an
// out-of-range source gives the caller its own value.
inline unsigned shuffleSourceLane(ShuffleMode mode, unsigned lane, int operand, int width) {
  const unsigned segmentMask = kWarpSize - static_cast<unsigned>(width);  // the lane bits naming the segment
  const unsigned segmentStart = lane & segmentMask;
  const unsigned segmentEnd = segmentStart | (31u & ~segmentMask);
  const unsigned b = static_cast<unsigned>(operand) & 31u;
  switch (mode) {
    case ShuffleMode::Index: return segmentStart | (b & ~segmentMask);
    case ShuffleMode::Up: return lane >= segmentStart + b ? lane - b : lane;
    case ShuffleMode::Down: return lane + b <= segmentEnd ? lane + b : lane;
    case ShuffleMode::Xor: return (lane ^ b) <= segmentEnd ? lane ^ b : lane;
  }
  return lane;
}

// What an element of a shared array remembers of its accesses since the last barrier. An epoch numbers
// the stretches between barriers (it grows at every barrier and at the start of every block), so that a
// record of an earlier epoch is simply stale and nothing needs clearing. Besides the last writer, two
// readers are kept (the first and any other), enough to name a reader other than any given thread.
struct SharedAccesses {
  uint32_t writeEpoch;
  uint32_t readEpoch;
  uint16_t writer;
  uint16_t firstReader;
  uint16_t otherReader;
};

constexpr uint16_t kNoThread = 0xffff;  // blocks have at most 1024 threads

enum class Access : uint8_t { Read, Write };

// A pointer argument of the launch running: where it points and the size of what it points to, to name
// the buffer of a faulting address.
struct PointerArgument {
  unsigned position;
  const void* pointer;
  size_t elementBytes;
};

// A warp-collective operation other than a shuffle (ldmatrix, mma), run once for the whole warp by its
// last lane to arrive: `operands` holds each lane's pointer to its own arguments and results, in lane
// order.
using WarpOperation = void (*)(void* const* operands);

// An asynchronous copy into shared memory (emmy_copy_async, a 16-byte cp.async): its bytes, read from
// global memory when it started, land in `destination` when a wait covers its group.
struct PendingCopy {
  SharedAccesses* records;  // of the array
  const char* buffer;
  int64_t index, count;     // its first element, and the array's elements
  void* destination;
  uint32_t group;
  uint8_t elements, bytes;
  unsigned char value[16];
};

struct SimThread {
  Context context;
  FiberStack stack;
  uint3 index{};
  ThreadState state = ThreadState::Runnable;
  // The shuffle or warp-collective operation it waits in (its name, for reports): a shuffle's arguments,
  // the value it offers, and (once the warp has all arrived) the value it receives; an operation's
  // function (nullptr for a shuffle) and this lane's operands.
  const char* shuffleName = nullptr;
  WarpOperation collective = nullptr;
  void* operands = nullptr;
  ShuffleMode shuffleMode = ShuffleMode::Index;
  int shuffleOperand = 0;
  int shuffleWidth = 0;
  uint64_t offered = 0;
  uint64_t received = 0;
  // Its asynchronous copies not yet waited for (Scheduler::waitForCopies), and the number of the group
  // it adds them to (how many groups it has closed).
  std::vector<PendingCopy> pendingCopies;
  uint32_t openGroup = 0;
};

// ---------------------------------------------------------------------------------------------------
// The profile of `emmy check --profile` (backend/sim/ARCHITECTURE.md, "Profiling"): every access of every
// thread to global memory (seen through the compiler's instrumentation, -fsanitize=thread's callbacks at
// the end of this file) and to shared memory (seen by SharedArray), grouped as the hardware groups them:
// the accesses a warp's lanes make at one site (the instruction's address) for the same time (the n-th
// time each lane got there) are one warp instruction. Its global requests, sectors and shared-memory
// wavefronts are counted when the warp's lanes have all stopped (at a barrier, a shuffle or their end),
// and summed per kernel and site; the harness writes them to a file at exit.
// ---------------------------------------------------------------------------------------------------

#if defined(EMMY_PROFILE)
constexpr bool kProfiling = true;
#else
constexpr bool kProfiling = false;
#endif

enum class Space : uint8_t { Global, Shared };

// Set while the simulation's own code runs (recording an access, counting, checking a shared access), so
// that its loads and stores, which the instrumentation reports too, are neither recorded nor costly. A
// fiber starts with it clear (Scheduler::threadMain), since a switch may leave it set.
inline bool inSimulationCode = false;

// Marks the simulation's own code for as long as it lives, when profiling. Its bounds are compiler
// barriers: where it is inlined into a kernel (a shared element's read), the optimizer would otherwise
// move the kernel's own loads into it (a float load and a bool store do not alias), and the
// instrumentation, which comes after, would report them while the flag is set: `w[d] + b_row[d]` lost
// its read of w.
class UnprofiledScope {
public:
  UnprofiledScope() : was_(inSimulationCode) {
    if constexpr (kProfiling) {
      asm volatile("" ::: "memory");
      inSimulationCode = true;
      asm volatile("" ::: "memory");
    }
  }
  ~UnprofiledScope() {
    if constexpr (kProfiling) {
      asm volatile("" ::: "memory");
      inSimulationCode = was_;
      asm volatile("" ::: "memory");
    }
  }
  UnprofiledScope(const UnprofiledScope&) = delete;
  UnprofiledScope& operator=(const UnprofiledScope&) = delete;

private:
  bool was_;
};

#if defined(EMMY_PROFILE)
// The counters of one access site (an instruction) in one kernel, summed over its warp instructions.
struct SiteCounters {
  uint64_t executions = 0;       // warp instructions
  uint64_t requests = 0;         // the parts of them the memory pipeline handles at once (see phaseLanes)
  uint64_t sectors = 0;          // global: the 32-byte sectors each request touches
  uint64_t idealSectors = 0;     // global: the fewest sectors that could hold the bytes each request touches
  uint64_t wavefronts = 0;       // shared: the passes each request needs (1 + its bank conflicts)
  uint64_t idealWavefronts = 0;  // shared: 1 per request
  uint64_t lanes = 0;            // active lanes, summed over the warp instructions
  uint64_t divergent = 0;        // warp instructions with some of the warp's running lanes inactive
};

struct SiteKey {
  uintptr_t site;
  uint32_t bytes;
  Access access;
  Space space;
  bool operator<(const SiteKey& other) const {
    return std::tie(site, bytes, access, space) < std::tie(other.site, other.bytes, other.access, other.space);
  }
};

struct KernelCounters {
  uint64_t launches = 0;
  uint64_t blocks = 0;
  unsigned threadsPerBlock = 0;
  uint64_t barriers = 0;  // __syncthreads() that released a block
  std::map<SiteKey, SiteCounters> sites;
  std::unordered_set<uint64_t> globalSectors;  // every global sector touched, for the bytes a kernel needs at least
};

// One access of one thread, until its warp instruction is complete. Addresses are device addresses: a
// global buffer's offset from its start, which cudaMalloc aligns to 256 bytes, plus a base per buffer; a
// shared array's offset from its start, which is taken to lie at bank 0, plus a base per array.
struct ProfiledAccess {
  uintptr_t site;
  uint64_t execution;  // how many accesses the thread made at `site` before this one, in this block
  uint64_t address;
  uint32_t bytes;
  uint8_t lane;
  Access access;
  Space space;
  // False for a lane that executes the instruction without an address of its own (the lanes past the
  // rows of an ldmatrix .x1 or .x2): active, so not divergent, but no request and no bytes.
  bool addressed;
};

// The lanes of a warp whose accesses of `bytes` each are handled as one request, 128 bytes at most: the
// whole warp up to 4 bytes, half of it for 8, a quarter for 16 (as the hardware serves shared memory, and
// global memory a 128-byte line at a time).
inline unsigned phaseLanes(uint32_t bytes) { return bytes <= 4 ? 32 : bytes <= 8 ? 16 : 8; }

class Profiler {
public:
  void beginLaunch(const char* kernel, unsigned threadsPerBlock) {
    kernel_ = &kernels_[kernel];
    ++kernel_->launches;
    kernel_->threadsPerBlock = threadsPerBlock;
    executions_.resize(threadsPerBlock);
    pending_.resize((threadsPerBlock + kWarpSize - 1) / kWarpSize);
    runningLanes_.resize(pending_.size());
  }
  void endLaunch() { kernel_ = nullptr; }

  void beginBlock(unsigned threads) {
    ++kernel_->blocks;
    for (unsigned t = 0; t < threads; ++t) executions_[t].clear();
    for (unsigned w = 0; w < pending_.size(); ++w) {
      pending_[w].clear();
      runningLanes_[w] = std::min(kWarpSize, threads - w * kWarpSize);
    }
  }
  void barrierReleased() { ++kernel_->barriers; }

  void note(unsigned thread, uintptr_t site, uint64_t address, uint32_t bytes, Access access, Space space,
            bool addressed = true) {
    UnprofiledScope unprofiled;
    uint64_t execution = 0;
    for (auto& [seen, count] : executions_[thread])
      if (seen == site) {
        execution = count++;
        goto found;
      }
    executions_[thread].push_back({site, 1});
  found:
    pending_[thread / kWarpSize].push_back(
        {site, execution, address, bytes, static_cast<uint8_t>(thread % kWarpSize), access, space, addressed});
  }

  // Counts the warp instructions of `warp` since its lanes last all stopped; `running` of its lanes have
  // not exited now.
  void completeWarp(unsigned warp, unsigned running) {
    UnprofiledScope unprofiled;
    const std::vector<ProfiledAccess>& accesses = pending_[warp];
    slots_.resize(accesses.size());
    ordered_.resize(accesses.size());
    starts_.resize(accesses.size() + 1);
    size_t slotCount = 0;
    const size_t groups = groupInstructions(accesses.data(), accesses.size(), slots_.data(), slotCount);
    laneIndex_.assign(groups * kWarpSize, -1);
    const size_t instructions = orderInstructions(accesses.data(), accesses.size(), slots_.data(), laneIndex_.data(),
                                                  groups, ordered_.data(), starts_.data());
    for (size_t i = 0; i < instructions; ++i)
      countInstruction(&ordered_[starts_[i]], &ordered_[0] + starts_[i + 1], runningLanes_[warp]);
    pending_[warp].clear();
    runningLanes_[warp] = running;
  }

  // Writes every kernel's counters to the file $EMMY_PROFILE_FILE (default: profile.txt).
  void write() const {
    const char* path = std::getenv("EMMY_PROFILE_FILE");
    std::FILE* file = std::fopen(path ? path : "profile.txt", "w");
    if (!file) return;
    std::fprintf(file, "emmy-profile 1\n");
    for (const auto& [name, kernel] : kernels_) {
      std::fprintf(file, "kernel %s %llu %llu %u %llu %llu\n", name.c_str(), (unsigned long long)kernel.launches,
                   (unsigned long long)kernel.blocks, kernel.threadsPerBlock, (unsigned long long)kernel.barriers,
                   (unsigned long long)kernel.globalSectors.size());
      for (const auto& [key, c] : kernel.sites)
        std::fprintf(file, "site %llx %s %s %u %llu %llu %llu %llu %llu %llu %llu %llu\n", (unsigned long long)key.site,
                     key.space == Space::Global ? "global" : "shared", key.access == Access::Read ? "load" : "store",
                     key.bytes, (unsigned long long)c.executions, (unsigned long long)c.requests,
                     (unsigned long long)c.sectors, (unsigned long long)c.idealSectors, (unsigned long long)c.wavefronts,
                     (unsigned long long)c.idealWavefronts, (unsigned long long)c.lanes, (unsigned long long)c.divergent);
    }
    std::fclose(file);
  }

private:
  // The accesses of one site (a kind of access at one instruction) since the warp's lanes last stopped:
  // the range of their executions, and where its warp instructions start among all of them.
  struct Slot {
    uintptr_t site;
    uint32_t bytes;
    Access access;
    Space space;
    uint64_t firstExecution, lastExecution;
    size_t firstGroup;
  };

  // Groups `count` accesses into warp instructions: the distinct sites into `slots` (their first
  // `slotCount` entries; `slots` holds an entry per access on entry), each with its range of executions;
  // returns how many instructions there can be (a slot's executions are consecutive per lane). Not
  // instrumented, like orderInstructions: they touch every access several times.
  __attribute__((no_sanitize("thread"))) static size_t groupInstructions(const ProfiledAccess* accesses, size_t count,
                                                                          Slot* slots, size_t& slotCount) {
    slotCount = 0;
    for (size_t i = 0; i < count; ++i) {
      const ProfiledAccess& a = accesses[i];
      size_t s = 0;
      while (s < slotCount && !(slots[s].site == a.site && slots[s].bytes == a.bytes && slots[s].access == a.access &&
                                slots[s].space == a.space))
        ++s;
      if (s == slotCount) slots[slotCount++] = {a.site, a.bytes, a.access, a.space, a.execution, a.execution, 0};
      // (No std::min: a call the instrumentation's attributes keep from inlining here.)
      if (a.execution < slots[s].firstExecution) slots[s].firstExecution = a.execution;
      if (a.execution > slots[s].lastExecution) slots[s].lastExecution = a.execution;
    }
    size_t groups = 0;
    for (size_t s = 0; s < slotCount; ++s) {
      slots[s].firstGroup = groups;
      groups += slots[s].lastExecution - slots[s].firstExecution + 1;
    }
    return groups;
  }

  // Places each access by its instruction (a slot's executions in order, slots in order of first
  // appearance) and lane (`laneIndex`: `groups` x 32, all -1 on entry); writes the instructions' accesses
  // in lane order to `ordered` and where each starts to `starts` (one more entry than instructions);
  // returns the number of instructions.
  __attribute__((no_sanitize("thread"))) static size_t orderInstructions(const ProfiledAccess* accesses, size_t count,
                                                                          const Slot* slots, int32_t* laneIndex, size_t groups,
                                                                          const ProfiledAccess** ordered, size_t* starts) {
    for (size_t i = 0; i < count; ++i) {
      const ProfiledAccess& a = accesses[i];
      size_t s = 0;
      while (!(slots[s].site == a.site && slots[s].bytes == a.bytes && slots[s].access == a.access && slots[s].space == a.space))
        ++s;
      laneIndex[(slots[s].firstGroup + (a.execution - slots[s].firstExecution)) * kWarpSize + a.lane] = static_cast<int32_t>(i);
    }
    size_t instructions = 0, placed = 0;
    for (size_t g = 0; g < groups; ++g) {
      const size_t first = placed;
      for (unsigned lane = 0; lane < kWarpSize; ++lane)
        if (laneIndex[g * kWarpSize + lane] >= 0) ordered[placed++] = &accesses[laneIndex[g * kWarpSize + lane]];
      if (placed > first) starts[instructions++] = first;
    }
    starts[instructions] = placed;
    return instructions;
  }

  // One warp instruction: the accesses of its active lanes, in lane order.
  void countInstruction(const ProfiledAccess* const* begin, const ProfiledAccess* const* end, unsigned runningLanes) {
    const ProfiledAccess& first = **begin;
    SiteCounters& counters = kernel_->sites[{first.site, first.bytes, first.access, first.space}];
    const auto active = static_cast<unsigned>(end - begin);
    ++counters.executions;
    counters.lanes += active;
    if (active < runningLanes) ++counters.divergent;
    const unsigned lanesPerPhase = phaseLanes(first.bytes);
    for (const ProfiledAccess* const* phase = begin; phase != end;) {
      const ProfiledAccess* const* phaseEnd = phase;
      bool addressed = false;
      while (phaseEnd != end && (*phaseEnd)->lane / lanesPerPhase == (*phase)->lane / lanesPerPhase)
        addressed |= (*phaseEnd++)->addressed;
      if (addressed) {
        ++counters.requests;
        if (first.space == Space::Global)
          countSectors(phase, phaseEnd, counters);
        else
          countWavefronts(phase, phaseEnd, counters);
      }
      phase = phaseEnd;
    }
  }

  void countSectors(const ProfiledAccess* const* begin, const ProfiledAccess* const* end, SiteCounters& counters) {
    std::vector<uint64_t> sectors;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [first byte, end)
    for (const ProfiledAccess* const* lane = begin; lane != end; ++lane) {
      const ProfiledAccess* a = *lane;
      if (!a->addressed) continue;
      ranges.push_back({a->address, a->address + a->bytes});
      for (uint64_t sector = a->address / 32; sector <= (a->address + a->bytes - 1) / 32; ++sector) sectors.push_back(sector);
    }
    std::sort(sectors.begin(), sectors.end());
    sectors.erase(std::unique(sectors.begin(), sectors.end()), sectors.end());
    counters.sectors += sectors.size();
    kernel_->globalSectors.insert(sectors.begin(), sectors.end());
    std::sort(ranges.begin(), ranges.end());
    uint64_t distinctBytes = 0, coveredTo = 0;
    for (const auto& [first, last] : ranges) {
      const uint64_t from = std::max(first, coveredTo);
      if (last > from) distinctBytes += last - from;
      coveredTo = std::max(coveredTo, last);
    }
    counters.idealSectors += (distinctBytes + 31) / 32;
  }

  // Shared memory has 32 banks of 4-byte words; the lanes of a request that touch different words of one
  // bank need a pass each, lanes that touch the same word share it (a broadcast).
  static void countWavefronts(const ProfiledAccess* const* begin, const ProfiledAccess* const* end, SiteCounters& counters) {
    std::vector<uint64_t> words;
    for (const ProfiledAccess* const* lane = begin; lane != end; ++lane)
      if ((*lane)->addressed)
        for (uint64_t word = (*lane)->address / 4; word <= ((*lane)->address + (*lane)->bytes - 1) / 4; ++word)
          words.push_back(word);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    unsigned perBank[kWarpSize] = {};
    unsigned passes = 1;
    for (uint64_t word : words) passes = std::max(passes, ++perBank[word % kWarpSize]);
    counters.wavefronts += passes;
    ++counters.idealWavefronts;
  }

  std::map<std::string, KernelCounters> kernels_;
  KernelCounters* kernel_ = nullptr;
  std::vector<std::vector<std::pair<uintptr_t, uint64_t>>> executions_;  // per thread: (site, accesses so far)
  std::vector<std::vector<ProfiledAccess>> pending_;                     // per warp
  std::vector<unsigned> runningLanes_;  // per warp: its lanes that had not exited when its instructions began
  // completeWarp's working space, kept to save allocations.
  std::vector<Slot> slots_;
  std::vector<int32_t> laneIndex_;
  std::vector<const ProfiledAccess*> ordered_;
  std::vector<size_t> starts_;
};
#else
// Without EMMY_PROFILE nothing is counted, and the hooks compile to nothing: the profiler's containers
// would cost every simulated program a second of compilation.
class Profiler {
public:
  void beginLaunch(const char*, unsigned) {}
  void endLaunch() {}
  void beginBlock(unsigned) {}
  void barrierReleased() {}
  void note(unsigned, uintptr_t, uint64_t, uint32_t, Access, Space, bool = true) {}
  void completeWarp(unsigned, unsigned) {}
  void write() const {}
};
#endif

class Scheduler {
public:
  using KernelBody = void (*)(const void* closure);

  // Runs the whole grid; returns false (with the error recorded) if the launch is invalid or a block
  // fails.
  bool runGrid(const char* kernelName, dim3 grid, dim3 block, KernelBody body, const void* closure);

  // The names of the launch's arguments as written (`#__VA_ARGS__`) and those that are pointers.
  void setArguments(const char* names, std::vector<PointerArgument> pointers);

  void arriveAtBarrier();
  uint64_t shuffle(const char* name, ShuffleMode mode, unsigned mask, uint64_t value, int operand, int width);
  // A warp-collective operation (ldmatrix, mma): waits like a shuffle until every lane of the warp has
  // called it, then the last lane to arrive runs `operation` once for the whole warp (WarpOperation).
  // Faster than the shuffles it would take, and the lanes must all be in the same operation: like an
  // invalid shuffle, a partial warp or a warp whose lanes call different operations stops the launch.
  void warpCollective(const char* name, WarpOperation operation, void* operands);
  unsigned activeLaneMask() const;
  unsigned currentLane() const { return current_ % kWarpSize; }

  // An access of the running thread to element `index` of the shared array `buffer` of `count`
  // elements: stops the block with a report if the index is out of bounds or if another thread
  // accessed the element since the last barrier and one of the two accesses is a write.
  inline void noteSharedAccess(Access access, SharedAccesses* records, const char* buffer, int64_t index,
                               int64_t count);

  // The start of an asynchronous copy into the element: a write that no read since the last barrier
  // may precede, the running thread's own included.
  inline void noteCopyStart(SharedAccesses* records, const char* buffer, int64_t index, int64_t count);

  // emmy_copy_async: the copy lands when a wait of the running thread covers it (the hardware may complete
  // it any time from its start until then): it is checked as a write at its start (SharedArray) and at
  // that wait, and written at the wait. At the thread's end, what it never waited for lands.
  void startCopy(const PendingCopy& copy);
  // emmy_wait_for_copies<pending>: closes the running thread's group of copies, and lands every group
  // but the `pending` newest.
  void waitForCopies(unsigned pending);

  // `emmy check --profile`: an access of the running thread at `site` (profiled when a kernel runs and,
  // for global memory, when `address` lies in a buffer from cudaMalloc).
  void noteGlobalAccess(uintptr_t site, const void* address, uint32_t bytes, Access access);
  void noteProfiledSharedAccess(uintptr_t site, const void* array, int64_t offset, uint32_t bytes, Access access,
                                bool addressed = true) {
    profiler_.note(current_, site, (reinterpret_cast<uintptr_t>(array) << 20) + static_cast<uint64_t>(offset), bytes,
                   access, Space::Shared, addressed);
  }
  // A shared array sized at launch, of `bytes` from byte `offset`, beyond the `given` bytes the launch sized.
  [[noreturn]] __attribute__((cold)) void stopAtSharedBeyondLaunch(const char* buffer, int64_t offset, int64_t bytes,
                                                                   int64_t given);
  // A read of `bytes` at element `index` of the shared array `buffer` (its byte `offset`) that the
  // hardware requires to be aligned to `bytes`, and is not.
  [[noreturn]] __attribute__((cold)) void stopAtMisaligned(const char* what, const char* buffer, int64_t index,
                                                                int64_t offset, unsigned bytes);
  void writeProfile() const { profiler_.write(); }

private:
  static void threadMain();
  static void reportWhereAddressSanitizerStopped();
  static void installFaultHandler();
  static void onFault(int signal, siginfo_t* info, void* context);

  // Reports, rare by nature: cold, so that they do not weigh on the code around the accesses.
  [[noreturn]] __attribute__((cold)) void stopAtOutOfBounds(Access access, const char* buffer, int64_t index,
                                                             int64_t count);
  [[noreturn]] __attribute__((cold)) void stopAtRace(Access access, const char* buffer, int64_t index, Access earlier,
                                                      unsigned other);
  [[noreturn]] __attribute__((cold)) void stopAtFault(const void* address, const char* verb);

  [[noreturn]] void exitThread();
  // Profiling: counts the warp instructions of the running thread's warp when all its lanes have stopped.
  void completeWarpIfStopped();

  bool preparePool(unsigned threadCount);
  bool runBlock(uint3 blockIndex);
  void switchToNextRunnable();
  void switchTo(unsigned next);
  [[noreturn]] void stopBlock();

  unsigned lanesOfWarp(unsigned warp) const { return std::min(kWarpSize, threadCount_ - warp * kWarpSize); }
  unsigned exitedLanes(unsigned warp) const;
  std::string threadInBlock(unsigned thread) const;
  std::string describeThreads(const std::vector<unsigned>& threads) const;
  std::string describeDeadlock() const;
  std::string describeCall(const char* function, const std::string& how) const;
  // Stops the launch when the lanes of `warp`, all arrived at a rendezvous, are not all in the same
  // warp-collective operation (shuffles, whatever their kind, count as one).
  void checkSameCollective(unsigned warp);
  std::string describeMixedWarp(unsigned warp) const;
  __attribute__((cold)) std::string describeFault(const void* address, const char* verb) const;
  std::string argumentName(unsigned position) const;

  std::vector<std::unique_ptr<SimThread>> pool_;  // stable addresses: a ucontext points into itself
  Context host_;
  const char* kernelName_ = nullptr;
  KernelBody body_ = nullptr;
  const void* closure_ = nullptr;
  unsigned threadCount_ = 0;
  unsigned current_ = 0;
  unsigned exited_ = 0;
  unsigned atBarrier_ = 0;
  std::vector<unsigned> atShuffle_;  // per warp
  std::string failure_;
  uint32_t epoch_ = 0;  // of the shared-memory accesses, see SharedAccesses (a run ends long before it wraps)
  const char* argumentNames_ = "";
  std::vector<PointerArgument> pointerArguments_;
  bool describingFault_ = false;
  struct sigaction previousFaultAction_ {};
  Profiler profiler_;
  bool profiling_ = false;  // a launch runs and is profiled
  bool profileWrittenAtExit_ = false;
};

inline Scheduler scheduler;

inline void Scheduler::noteSharedAccess(Access access, SharedAccesses* records, const char* buffer, int64_t index,
                                        int64_t count) {
  if (static_cast<uint64_t>(index) >= static_cast<uint64_t>(count)) stopAtOutOfBounds(access, buffer, index, count);
  SharedAccesses& record = records[index];
  const auto self = static_cast<uint16_t>(current_);
  if (record.writeEpoch == epoch_ && record.writer != self) stopAtRace(access, buffer, index, Access::Write, record.writer);
  if (access == Access::Read) {
    if (record.readEpoch != epoch_) {
      record.readEpoch = epoch_;
      record.firstReader = self;
      record.otherReader = kNoThread;
    } else if (record.otherReader == kNoThread && record.firstReader != self) {
      record.otherReader = self;  // once: storing at every read would cost more
    }
    return;
  }
  if (record.readEpoch == epoch_) {
    const uint16_t otherReader = record.firstReader != self ? record.firstReader : record.otherReader;
    if (otherReader != kNoThread) stopAtRace(access, buffer, index, Access::Read, otherReader);
  }
  record.writeEpoch = epoch_;
  record.writer = self;
}

inline void Scheduler::noteCopyStart(SharedAccesses* records, const char* buffer, int64_t index, int64_t count) {
  if (static_cast<uint64_t>(index) < static_cast<uint64_t>(count) && records[index].readEpoch == epoch_)
    stopAtRace(Access::Write, buffer, index, Access::Read, records[index].firstReader);
  noteSharedAccess(Access::Write, records, buffer, index, count);
}

// Not instrumented: it runs at every load and store of the program while a kernel runs.
__attribute__((no_sanitize("thread"))) inline void Scheduler::noteGlobalAccess(uintptr_t site, const void* address,
                                                                               uint32_t bytes, Access access) {
  if (!profiling_) return;
  // Device addresses: each buffer at its own 256-byte aligned base, as cudaMalloc aligns it.
  const char* byte = static_cast<const char*>(address);
  for (size_t b = 0; b < allocationCount; ++b) {
    const GlobalAllocation& allocation = allocationTable[b];
    if (byte >= allocation.data && byte < allocation.data + allocation.bytes) {
      profiler_.note(current_, site, (allocation.serial << 40) + static_cast<uint64_t>(byte - allocation.data), bytes,
                     access, Space::Global);
      return;
    }
  }
}

// The rest of the scheduler, which programs call at launches, barriers, shuffles and reports: compiled
// into each program, or (where the program is compiled with -DEMMY_SIM_LINKED_RUNTIME) once, with
// -DEMMY_SIM_RUNTIME_OBJECT, into an object that programs link (backend/sim/precompiled_simulation.cpp). It
// is about half of what the compiler generates for a small kernel's program.
#if defined(EMMY_SIM_RUNTIME_OBJECT)
#define EMMY_SIM_RUNTIME_FUNCTION
#else
#define EMMY_SIM_RUNTIME_FUNCTION inline
#endif
#if !defined(EMMY_SIM_LINKED_RUNTIME)

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::threadMain() {
  inSimulationCode = false;
  const StackBounds previous = arrivedFrom();
  // Thread 0 is always started by the host: the switches back to the host need to know its stack.
  if (scheduler.current_ == 0) scheduler.host_.stack = previous;
  scheduler.body_(scheduler.closure_);
  scheduler.exitThread();
}

EMMY_SIM_RUNTIME_FUNCTION bool Scheduler::preparePool(unsigned threadCount) {
  while (pool_.size() < threadCount) {
    auto thread = std::make_unique<SimThread>();
    if (!thread->stack.allocate(EMMY_SIM_STACK_BYTES)) return false;
    pool_.push_back(std::move(thread));
  }
  return true;
}

EMMY_SIM_RUNTIME_FUNCTION bool Scheduler::runGrid(const char* kernelName, dim3 grid, dim3 block, KernelBody body,
                                                  const void* closure) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  std::string invalid;
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0)
    invalid = "a grid or block dimension is 0";
  else if (block.x > 1024 || block.y > 1024 || block.z > 64)
    invalid = "a block dimension is over its limit (1024,1024,64)";
  else if (threads > 1024)
    invalid = "the block has " + std::to_string(threads) + " threads, more than 1024";
  else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    invalid = "a grid dimension is over its limit (2147483647,65535,65535)";
  if (!invalid.empty()) {
    recordError(cudaErrorInvalidConfiguration, std::string("invalid configuration argument: kernel ") + kernelName +
                                                   " launched with grid " + coordinates(grid) + " and block " +
                                                   coordinates(block) + ": " + invalid);
    return false;
  }
  threadCount_ = static_cast<unsigned>(threads);
  if (!preparePool(threadCount_)) {
    recordError(cudaErrorMemoryAllocation, std::string("out of memory: no stacks for the ") +
                                               std::to_string(threadCount_) + " simulated threads of kernel " +
                                               kernelName);
    return false;
  }
#if EMMY_SIM_ASAN
  __sanitizer_set_death_callback(&Scheduler::reportWhereAddressSanitizerStopped);
#endif
  installFaultHandler();
  kernelName_ = kernelName;
  body_ = body;
  closure_ = closure;
  currentBlockDim = block;
  currentGridDim = grid;
  for (unsigned t = 0; t < threadCount_; ++t)
    pool_[t]->index = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
  atShuffle_.assign((threadCount_ + kWarpSize - 1) / kWarpSize, 0);

  if constexpr (kProfiling) {
    if (!profileWrittenAtExit_) profileWrittenAtExit_ = std::atexit([] { scheduler.writeProfile(); }) == 0;
    profiler_.beginLaunch(kernelName, threadCount_);
    profiling_ = true;
  }
  bool succeeded = true;
  for (unsigned z = 0; z < grid.z && succeeded; ++z)
    for (unsigned y = 0; y < grid.y && succeeded; ++y)
      for (unsigned x = 0; x < grid.x && succeeded; ++x) succeeded = runBlock({x, y, z});
  if constexpr (kProfiling) {
    profiler_.endLaunch();
    profiling_ = false;
  }
  kernelName_ = nullptr;
  if (!succeeded) {
    recordError(cudaErrorLaunchFailure, std::move(failure_));
    failure_.clear();
  }
  return succeeded;
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::setArguments(const char* names, std::vector<PointerArgument> pointers) {
  argumentNames_ = names;
  pointerArguments_ = std::move(pointers);
}

// A fault in a kernel (an access to a guard page of a global buffer, a stack overflow, a wild pointer)
// stops the launch with a report, as a deadlock does, instead of killing the program. The handler runs
// on a stack of its own (the fiber's may be the one that overflowed) and never returns: it switches to
// the host, like any stop, which is as safe as the usual longjmp out of a handler of a synchronous
// fault. SA_NODEFER keeps the signal unblocked for the next fault, since the handler never returns.
EMMY_SIM_RUNTIME_FUNCTION void Scheduler::installFaultHandler() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  static char signalStack[64 * 1024];
  stack_t stack{};
  stack.ss_sp = signalStack;
  stack.ss_size = sizeof signalStack;
  sigaltstack(&stack, nullptr);
  struct sigaction action {};
  action.sa_sigaction = &Scheduler::onFault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &scheduler.previousFaultAction_);
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::onFault(int, siginfo_t* info, void* context) {
  if (scheduler.kernelName_ == nullptr || scheduler.describingFault_) {
    // Not a kernel's access, or a fault while reporting one: the fault happens again when the handler
    // returns, and is handled as it would be without the simulation.
    sigaction(SIGSEGV, &scheduler.previousFaultAction_, nullptr);
    return;
  }
  const char* verb = "accesses";
#if defined(__x86_64__) && defined(__linux__)
  // Bit 1 of the page fault's error code: the access was a write.
  verb = (static_cast<const ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) != 0 ? "writes" : "reads";
#else
  (void)context;
#endif
  scheduler.stopAtFault(info->si_addr, verb);
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::stopAtFault(const void* address, const char* verb) {
  describingFault_ = true;
  failure_ = describeFault(address, verb);
  describingFault_ = false;
  stopBlock();
}

// The argument at `position` as the launch spelled it: the text between the commas outside brackets.
EMMY_SIM_RUNTIME_FUNCTION std::string Scheduler::argumentName(unsigned position) const {
  const char* start = argumentNames_;
  unsigned at = 0;
  int depth = 0;
  for (const char* c = argumentNames_;; ++c) {
    if (*c == '\0' || (*c == ',' && depth == 0)) {
      if (at == position) {
        const char* end = c;
        while (start < end && *start == ' ') ++start;
        while (end > start && end[-1] == ' ') --end;
        return std::string(start, end);
      }
      if (*c == '\0') return "?";
      ++at;
      start = c + 1;
    } else if (*c == '(' || *c == '[' || *c == '{') {
      ++depth;
    } else if (*c == ')' || *c == ']' || *c == '}') {
      --depth;
    }
  }
}

// Names the buffer of a faulting address by the pointer argument of the launch that points into its
// allocation, and the element by that argument's type.
EMMY_SIM_RUNTIME_FUNCTION std::string Scheduler::describeFault(const void* address, const char* verb) const {
  const std::string thread = threadInBlock(current_);
  if (const GlobalAllocation* allocation = allocationAround(address)) {
    const char* end = allocation->data + allocation->bytes;
    for (const PointerArgument& argument : pointerArguments_) {
      const char* pointer = static_cast<const char*>(argument.pointer);
      if (pointer < allocation->data || pointer > end) continue;
      const auto size = static_cast<long long>(argument.elementBytes);
      const long long offset = static_cast<const char*>(address) - pointer;
      const long long element = offset >= 0 ? offset / size : -((size - 1 - offset) / size);
      const std::string name = argumentName(argument.position);
      return formatted("out-of-bounds access in kernel %s: %s %s %s[%lld] but global buffer %s has %lld elements",
                       kernelName_, thread.c_str(), verb, name.c_str(), element, name.c_str(), (end - pointer) / size);
    }
    return formatted(
        "out-of-bounds access in kernel %s: %s %s byte %lld of a global allocation of %zu bytes that no "
        "argument of the kernel points to",
        kernelName_, thread.c_str(), verb, static_cast<long long>(static_cast<const char*>(address) - allocation->data),
        allocation->bytes);
  }
  for (unsigned t = 0; t < threadCount_; ++t)
    if (pool_[t]->stack.guardHolds(address))
      return formatted(
          "stack overflow in kernel %s: %s used more than its %zu bytes of stack (raise "
          "EMMY_SIM_STACK_BYTES)",
          kernelName_, threadInBlock(t).c_str(), static_cast<size_t>(EMMY_SIM_STACK_BYTES));
  return formatted("invalid memory access in kernel %s: %s %s address %p, which is in no buffer", kernelName_,
                   thread.c_str(), verb, address);
}

// AddressSanitizer's report names the kernel's function but cannot know which simulated thread ran it.
EMMY_SIM_RUNTIME_FUNCTION void Scheduler::reportWhereAddressSanitizerStopped() {
  if (scheduler.kernelName_ == nullptr) return;
  std::fprintf(stderr, "emmy simulation: the error above happened in kernel %s, %s\n", scheduler.kernelName_,
               scheduler.threadInBlock(scheduler.current_).c_str());
}

EMMY_SIM_RUNTIME_FUNCTION bool Scheduler::runBlock(uint3 blockIndex) {
  currentBlockIdx = blockIndex;
  ++epoch_;
  for (unsigned t = 0; t < threadCount_; ++t) {
    SimThread& thread = *pool_[t];
    thread.state = ThreadState::Runnable;
    thread.pendingCopies.clear();
    thread.openGroup = 0;
    startContext(thread.context, thread.stack.usable(), EMMY_SIM_STACK_BYTES, &Scheduler::threadMain);
  }
  exited_ = 0;
  atBarrier_ = 0;
  std::fill(atShuffle_.begin(), atShuffle_.end(), 0u);
  if constexpr (kProfiling) profiler_.beginBlock(threadCount_);
  // The threads run until every one has exited or nothing can run; either way control comes back here.
  current_ = 0;
  currentThreadIdx = pool_[0]->index;
  switchContext(host_, pool_[0]->context);
  return failure_.empty();
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::switchTo(unsigned next) {
  SimThread& from = *pool_[current_];
  current_ = next;
  currentThreadIdx = pool_[next]->index;
  if (from.state == ThreadState::Exited) {
    leaveContext(from.context, pool_[next]->context);
    __builtin_unreachable();
  }
  switchContext(from.context, pool_[next]->context);
  // Resumed: whoever switched back to this thread has set current_ and currentThreadIdx for it.
}

// Round-robin: the next runnable thread after the current one in linear order. When there is none,
// the block is over: finished if every thread exited, deadlocked otherwise.
EMMY_SIM_RUNTIME_FUNCTION void Scheduler::switchToNextRunnable() {
  for (unsigned step = 1; step <= threadCount_; ++step) {
    unsigned next = current_ + step;
    if (next >= threadCount_) next -= threadCount_;
    if (pool_[next]->state == ThreadState::Runnable) {
      switchTo(next);
      return;
    }
  }
  if (exited_ == threadCount_) {
    leaveContext(pool_[current_]->context, host_);
    __builtin_unreachable();
  }
  failure_ = describeDeadlock();
  stopBlock();
}

// Ends the block with failure_ (set by the caller in a statement of its own, so that every temporary
// of the message is gone: nothing after this point runs on this stack).
EMMY_SIM_RUNTIME_FUNCTION void Scheduler::stopBlock() {
  // The suspended threads are abandoned where they stand: the next block restarts every fiber from the
  // top, and kernels hold no resources that would need their destructors.
  leaveContext(pool_[current_]->context, host_);
  __builtin_unreachable();
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::arriveAtBarrier() {
  pool_[current_]->state = ThreadState::AtBarrier;
  if (++atBarrier_ == threadCount_) {
    // The last to arrive releases everyone and goes on without a switch.
    atBarrier_ = 0;
    ++epoch_;
    if constexpr (kProfiling) {
      profiler_.barrierReleased();
      for (unsigned warp = 0; warp * kWarpSize < threadCount_; ++warp)
        profiler_.completeWarp(warp, lanesOfWarp(warp) - exitedLanes(warp));
    }
    for (unsigned t = 0; t < threadCount_; ++t) pool_[t]->state = ThreadState::Runnable;
    return;
  }
  if constexpr (kProfiling) completeWarpIfStopped();
  switchToNextRunnable();
}

EMMY_SIM_RUNTIME_FUNCTION uint64_t Scheduler::shuffle(const char* name, ShuffleMode mode, unsigned mask, uint64_t value,
                                                      int operand, int width) {
  const unsigned warp = current_ / kWarpSize;
  const unsigned lanes = lanesOfWarp(warp);
  const unsigned existingLanes = lanes == kWarpSize ? 0xffffffffu : (1u << lanes) - 1;
  if (width < 1 || width > static_cast<int>(kWarpSize) || (width & (width - 1)) != 0) {
    failure_ = describeCall(name, "with width " + std::to_string(width) + ", which is not a power of 2 from 1 to 32");
    stopBlock();
  }
  if ((mask & existingLanes) != existingLanes) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%08x", mask);
    failure_ =
        describeCall(name, std::string("with mask ") + hex +
                               ", which leaves out lanes of its warp: the simulation runs only whole-warp shuffles");
    stopBlock();
  }
  SimThread& self = *pool_[current_];
  self.state = ThreadState::AtShuffle;
  self.shuffleName = name;
  self.collective = nullptr;
  self.shuffleMode = mode;
  self.shuffleOperand = operand;
  self.shuffleWidth = width;
  self.offered = value;
  if (++atShuffle_[warp] == lanes) {
    // The last lane to arrive makes the exchange for the whole warp and goes on without a switch.
    atShuffle_[warp] = 0;
    checkSameCollective(warp);
    if constexpr (kProfiling) profiler_.completeWarp(warp, lanes - exitedLanes(warp));
    const unsigned first = warp * kWarpSize;
    for (unsigned lane = 0; lane < lanes; ++lane) {
      SimThread& reader = *pool_[first + lane];
      const unsigned source = shuffleSourceLane(reader.shuffleMode, lane, reader.shuffleOperand, reader.shuffleWidth);
      // A lane past the end of a partial warp does not exist: what the GPU returns is undefined, and the
      // simulation returns all ones (NaN for floating point) so that using it shows.
      reader.received = source < lanes ? pool_[first + source]->offered : ~uint64_t{0};
      reader.state = ThreadState::Runnable;
    }
  } else {
    if constexpr (kProfiling) completeWarpIfStopped();
    switchToNextRunnable();
  }
  return self.received;
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::warpCollective(const char* name, WarpOperation operation, void* operands) {
  const unsigned warp = current_ / kWarpSize;
  const unsigned lanes = lanesOfWarp(warp);
  if (lanes != kWarpSize) {
    failure_ = describeCall(name, "in a warp of " + std::to_string(lanes) +
                                      " threads (the block's last, partial warp): it needs all 32 lanes of a warp");
    stopBlock();
  }
  SimThread& self = *pool_[current_];
  self.state = ThreadState::AtShuffle;
  self.shuffleName = name;
  self.collective = operation;
  self.operands = operands;
  if (++atShuffle_[warp] == lanes) {
    // As a shuffle: the last lane to arrive computes for the whole warp and goes on without a switch.
    atShuffle_[warp] = 0;
    checkSameCollective(warp);
    if constexpr (kProfiling) profiler_.completeWarp(warp, lanes - exitedLanes(warp));
    void* laneOperands[kWarpSize];
    for (unsigned lane = 0; lane < kWarpSize; ++lane) {
      SimThread& thread = *pool_[warp * kWarpSize + lane];
      laneOperands[lane] = thread.operands;
      thread.state = ThreadState::Runnable;
    }
    UnprofiledScope unprofiled;  // the operation's accesses are the simulation's, not the kernel's
    operation(laneOperands);
  } else {
    if constexpr (kProfiling) completeWarpIfStopped();
    switchToNextRunnable();
  }
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::checkSameCollective(unsigned warp) {
  const WarpOperation operation = pool_[current_]->collective;
  for (unsigned t = warp * kWarpSize; t < warp * kWarpSize + lanesOfWarp(warp); ++t)
    if (pool_[t]->collective != operation) {
      failure_ = describeMixedWarp(warp);
      stopBlock();
    }
}

EMMY_SIM_RUNTIME_FUNCTION std::string Scheduler::describeMixedWarp(unsigned warp) const {
  const SimThread& self = *pool_[current_];
  std::vector<unsigned> others;
  for (unsigned t = warp * kWarpSize; t < warp * kWarpSize + lanesOfWarp(warp); ++t)
    if (pool_[t]->collective != self.collective) others.push_back(t);
  const SimThread& other = *pool_[others.front()];
  const bool sameName = std::strcmp(other.shuffleName, self.shuffleName) == 0;
  return describeCall(self.shuffleName, std::string("but ") + (others.size() == 1 ? "thread " : "threads ") +
                                            describeThreads(others) + " of its warp " +
                                            (others.size() == 1 ? "calls " : "call ") + other.shuffleName + "()" +
                                            (sameName ? " with other template arguments" : "") +
                                            ": the lanes of a warp must all execute the same instruction");
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::stopAtMisaligned(const char* what, const char* buffer, int64_t index,
                                                               int64_t offset, unsigned bytes) {
  failure_ = formatted(
      "misaligned access in kernel %s: %s %s at %s[%lld], byte %lld of shared buffer %s, "
      "which is not a multiple of %u",
      kernelName_, threadInBlock(current_).c_str(), what, buffer, static_cast<long long>(index),
      static_cast<long long>(offset), buffer, bytes);
  stopBlock();
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::stopAtSharedBeyondLaunch(const char* buffer, int64_t offset, int64_t bytes,
                                                                   int64_t given) {
  failure_ = formatted(
      "shared memory beyond the launch's in kernel %s: %s declares shared buffer %s of %lld bytes "
      "from byte %lld, but the launch sized %lld bytes",
      kernelName_, threadInBlock(current_).c_str(), buffer, static_cast<long long>(bytes),
      static_cast<long long>(offset), static_cast<long long>(given));
  stopBlock();
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::stopAtOutOfBounds(Access access, const char* buffer, int64_t index,
                                                            int64_t count) {
  failure_ = formatted("out-of-bounds access in kernel %s: %s %s %s[%lld] but shared buffer %s has %lld elements",
                       kernelName_, threadInBlock(current_).c_str(), access == Access::Read ? "reads" : "writes",
                       buffer, static_cast<long long>(index), buffer, static_cast<long long>(count));
  stopBlock();
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::stopAtRace(Access access, const char* buffer, int64_t index, Access earlier,
                                                     unsigned other) {
  failure_ = formatted(
      "data race on shared buffer %s in kernel %s: %s %s %s[%lld], which thread %s %s, with no "
      "__syncthreads() between",
      buffer, kernelName_, threadInBlock(current_).c_str(), access == Access::Read ? "reads" : "writes", buffer,
      static_cast<long long>(index), coordinates(pool_[other]->index).c_str(),
      earlier == Access::Read ? "read" : "wrote");
  stopBlock();
}

EMMY_SIM_RUNTIME_FUNCTION unsigned Scheduler::activeLaneMask() const {
  const unsigned first = current_ / kWarpSize * kWarpSize;
  unsigned mask = 0;
  for (unsigned lane = 0; lane < lanesOfWarp(current_ / kWarpSize); ++lane)
    if (pool_[first + lane]->state != ThreadState::Exited) mask |= 1u << lane;
  return mask;
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::startCopy(const PendingCopy& copy) {
  SimThread& thread = *pool_[current_];
  thread.pendingCopies.push_back(copy);
  thread.pendingCopies.back().group = thread.openGroup;
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::waitForCopies(unsigned pending) {
  SimThread& thread = *pool_[current_];
  ++thread.openGroup;
  std::vector<PendingCopy>& copies = thread.pendingCopies;
  size_t kept = 0;
  for (PendingCopy& copy : copies) {
    if (copy.group + pending >= thread.openGroup) {
      copies[kept++] = copy;
      continue;
    }
    for (int64_t element = 0; element < copy.elements; ++element)
      noteSharedAccess(Access::Write, copy.records, copy.buffer, copy.index + element, copy.count);
    std::memcpy(copy.destination, copy.value, copy.bytes);
  }
  copies.resize(kept);
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::exitThread() {
  waitForCopies(0);
  pool_[current_]->state = ThreadState::Exited;
  ++exited_;
  if constexpr (kProfiling) completeWarpIfStopped();
  switchToNextRunnable();
  __builtin_unreachable();
}

EMMY_SIM_RUNTIME_FUNCTION void Scheduler::completeWarpIfStopped() {
  const unsigned warp = current_ / kWarpSize, first = warp * kWarpSize, lanes = lanesOfWarp(warp);
  for (unsigned t = first; t < first + lanes; ++t)
    if (pool_[t]->state == ThreadState::Runnable) return;
  profiler_.completeWarp(warp, lanes - exitedLanes(warp));
}

EMMY_SIM_RUNTIME_FUNCTION unsigned Scheduler::exitedLanes(unsigned warp) const {
  unsigned exited = 0;
  for (unsigned t = warp * kWarpSize; t < warp * kWarpSize + lanesOfWarp(warp); ++t)
    exited += pool_[t]->state == ThreadState::Exited;
  return exited;
}

EMMY_SIM_RUNTIME_FUNCTION std::string Scheduler::threadInBlock(unsigned thread) const {
  return "thread " + coordinates(pool_[thread]->index) + " of block " + coordinates(currentBlockIdx);
}

// "(40,0,0)", or "(32..63,0,0)" for a run of x in one row, up to three runs and a count of the rest.
EMMY_SIM_RUNTIME_FUNCTION std::string Scheduler::describeThreads(const std::vector<unsigned>& threads) const {
  constexpr size_t kRunsShown = 3;
  std::vector<std::pair<unsigned, unsigned>> runs;  // first and last linear index of each run
  for (unsigned t : threads) {
    if (!runs.empty() && runs.back().second + 1 == t && pool_[t]->index.x != 0)
      runs.back().second = t;
    else
      runs.push_back({t, t});
  }
  std::string text;
  size_t shownThreads = 0;
  for (size_t r = 0; r < runs.size() && r < kRunsShown; ++r) {
    const auto [first, last] = runs[r];
    const uint3 i = pool_[first]->index;
    if (r > 0) text += ", ";
    text += "(" + std::to_string(i.x) + (first == last ? "" : ".." + std::to_string(pool_[last]->index.x)) + "," +
            std::to_string(i.y) + "," + std::to_string(i.z) + ")";
    shownThreads += last - first + 1;
  }
  if (runs.size() > kRunsShown) text += " and " + std::to_string(threads.size() - shownThreads) + " more";
  return text;
}

EMMY_SIM_RUNTIME_FUNCTION std::string Scheduler::describeCall(const char* function, const std::string& how) const {
  return std::string("kernel ") + kernelName_ + ": " + threadInBlock(current_) + " calls " + function + "() " + how;
}

// Names the first waiting thread and the threads it waits for, by what they are doing instead: for a
// barrier the whole block, for a shuffle the thread's warp.
EMMY_SIM_RUNTIME_FUNCTION std::string Scheduler::describeDeadlock() const {
  unsigned waiter = 0;
  while (pool_[waiter]->state == ThreadState::Exited) ++waiter;
  const SimThread& waiting = *pool_[waiter];
  const bool atBarrier = waiting.state == ThreadState::AtBarrier;
  const unsigned first = atBarrier ? 0 : waiter / kWarpSize * kWarpSize;
  const unsigned end = atBarrier ? threadCount_ : first + lanesOfWarp(waiter / kWarpSize);
  std::vector<unsigned> exited, elsewhere;
  // For a barrier, the threads in a warp rendezvous by what they wait in: shuffles (of any kind) or each
  // warp-collective operation.
  std::vector<std::pair<const char*, std::vector<unsigned>>> inWarpOperations;
  for (unsigned t = first; t < end; ++t) {
    const SimThread& thread = *pool_[t];
    if (thread.state == ThreadState::Exited) {
      exited.push_back(t);
    } else if (thread.state != waiting.state && atBarrier && thread.collective != nullptr) {
      auto group = inWarpOperations.begin();
      while (group != inWarpOperations.end() && std::strcmp(group->first, thread.shuffleName) != 0) ++group;
      if (group == inWarpOperations.end()) group = inWarpOperations.insert(group, {thread.shuffleName, {}});
      group->second.push_back(t);
    } else if (thread.state != waiting.state) {
      elsewhere.push_back(t);
    }
  }
  const char* scope = atBarrier ? "" : " of its warp";
  std::string reasons;
  const auto add = [&](const std::vector<unsigned>& threads, const char* verbForOne, const char* verbForMany) {
    if (threads.empty()) return;
    if (!reasons.empty()) reasons += " and ";
    reasons += (threads.size() == 1 ? "thread " : "threads ") + describeThreads(threads) + scope + " " +
               (threads.size() == 1 ? verbForOne : verbForMany);
  };
  add(exited, "has exited", "have exited");
  if (atBarrier) {
    add(elsewhere, "waits in a warp shuffle", "wait in a warp shuffle");
    for (const auto& [name, threads] : inWarpOperations)
      add(threads, ("waits in " + std::string(name) + "()").c_str(), ("wait in " + std::string(name) + "()").c_str());
  } else {
    add(elsewhere, "waits at __syncthreads()", "wait at __syncthreads()");
  }
  return std::string("deadlock in kernel ") + kernelName_ + ": " + threadInBlock(waiter) + " waits at " +
         (atBarrier ? std::string("__syncthreads()") : std::string(waiting.shuffleName) + "()") + " but " + reasons;
}
#endif  // !EMMY_SIM_LINKED_RUNTIME

template <class Body>
inline void invokeBody(const void* closure) {
  (*static_cast<const Body*>(closure))();
}

template <class Element>
constexpr size_t elementBytes = sizeof(Element);
template <>
constexpr size_t elementBytes<void> = 1;

template <class Argument>
inline void addIfPointer(std::vector<PointerArgument>& pointers, unsigned position, const Argument& argument) {
  if constexpr (std::is_pointer_v<Argument>)
    pointers.push_back({position, argument, elementBytes<std::remove_cv_t<std::remove_pointer_t<Argument>>>});
}

template <class... Arguments, size_t... Positions>
inline std::vector<PointerArgument> pointerArguments(std::index_sequence<Positions...>, const Arguments&... arguments) {
  std::vector<PointerArgument> pointers;
  (addIfPointer(pointers, Positions, arguments), ...);
  return pointers;
}

inline unsigned long long launchCount = 0;
// The bytes of shared memory sized at launch that the running launch gave (EMMY_LAUNCH_SIZED).
inline uint64_t launchSharedBytes = 0;

// The most shared memory a launch may size: $EMMY_SIM_SHARED_BYTES, or the 227 KiB of the H200 that the
// static model takes (sm_90). Tests set less to run the kernels' path for rows that do not fit.
inline int64_t launchSharedLimit() {
  const char* text = std::getenv("EMMY_SIM_SHARED_BYTES");
  return text ? std::strtoll(text, nullptr, 10) : int64_t{227 * 1024};
}

// The most a kernel with 32-bit indices may compute as an index: $EMMY_SIM_INDEX_LIMIT, or 2^31 - 1 as on
// the GPU. Tests set less (0: always) to run the kernels' 64-bit twins at the sizes a simulation affords.
inline int64_t indexLimit() {
  const char* text = std::getenv("EMMY_SIM_INDEX_LIMIT");
  return text ? std::strtoll(text, nullptr, 10) : int64_t{2147483647};
}

// $EMMY_SIM_MAX_BLOCKS=N caps each dimension of every valid grid at N blocks. The generated kernels stride
// over the blocks they are not given, so that tests see those loops run more than once (the barrier
// before a block's next tile, say) at sizes a simulation can afford.
inline dim3 cappedGrid(dim3 grid) {
  static const unsigned cap = [] {
    const char* text = std::getenv("EMMY_SIM_MAX_BLOCKS");
    return text ? static_cast<unsigned>(std::strtoul(text, nullptr, 10)) : 0u;
  }();
  if (cap == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) return grid;  // runGrid refuses it
  auto capped = [&](unsigned blocks) { return blocks == 0 ? 0u : std::min(blocks, cap); };
  return dim3(capped(grid.x), capped(grid.y), capped(grid.z));
}

template <class Kernel, class... Arguments>
inline void launch(const char* kernelName, const char* argumentNames, dim3 grid, dim3 block, Kernel kernel,
                   Arguments... arguments) {
  ++launchCount;
  grid = cappedGrid(grid);
  scheduler.setArguments(argumentNames, pointerArguments(std::index_sequence_for<Arguments...>{}, arguments...));
  const auto body = [&] { kernel(arguments...); };
  scheduler.runGrid(kernelName, grid, block, &invokeBody<decltype(body)>, &body);
}

// A launch that gives the kernel `sharedBytes` of shared memory sized at launch: refused, as by the
// device, beyond what a block may have.
template <class Kernel, class... Arguments>
inline void launchSized(const char* kernelName, const char* argumentNames, dim3 grid, dim3 block, int64_t sharedBytes,
                        Kernel kernel, Arguments... arguments) {
  if (sharedBytes < 0 || sharedBytes > launchSharedLimit()) {
    ++launchCount;
    recordError(cudaErrorInvalidValue, std::string("invalid argument: kernel ") + kernelName + " launched with " +
                                           std::to_string(sharedBytes) + " bytes of shared memory sized at launch, " +
                                           "more than the " + std::to_string(launchSharedLimit()) + " a block may have");
    return;
  }
  launchSharedBytes = static_cast<uint64_t>(sharedBytes);
  launch(kernelName, argumentNames, grid, block, kernel, arguments...);
  launchSharedBytes = 0;
}

// The value a shuffle carries, as the bits of any type of up to 8 bytes.
template <class T>
inline uint64_t shuffleBits(T value) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= sizeof(uint64_t), "a shuffle moves up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  return bits;
}

template <class T>
inline T shuffleValue(uint64_t bits) {
  T value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Shared memory is plain static storage the compiler sees no other thread touch; the barrier also tells
// it that memory may have changed while this thread was switched out.
inline void memoryBarrier() { asm volatile("" ::: "memory"); }

template <class T, int64_t Count>
struct SharedArray;

#if defined(EMMY_PROFILE)
#if !defined(__x86_64__)
#error "the profile of emmy check --profile needs x86-64"
#endif
// The address of the instruction this is inlined into: a profiled access's site.
__attribute__((always_inline)) inline uintptr_t hereInCode() {
  uintptr_t address;
  asm volatile("lea 0(%%rip), %0" : "=r"(address));
  return address;
}
#endif

// What `array[index]` is: reading it (converting it to T) and assigning to it are the accesses that
// SharedArray checks. When profiling, every access is inlined into the kernel and takes the address of
// its own code as its site (`hereInCode`): a call would hide the kernel's store of the value it returns
// (GCC does not instrument a store of a call's result, `y[i] = tile[j]` with a 16-bit element).
#if defined(EMMY_PROFILE)
#define EMMY_SIM_SITE __attribute__((always_inline)) inline
#define EMMY_SIM_CALLER ::emmy_sim::detail::hereInCode()
#else
#define EMMY_SIM_SITE
#define EMMY_SIM_CALLER uintptr_t{0}
#endif
template <class T, int64_t Count>
class SharedElement {
public:
  SharedElement(SharedArray<T, Count>& array, int64_t index) : array_(array), index_(index) {}

  EMMY_SIM_SITE operator T() const { return array_.read(index_, EMMY_SIM_CALLER); }
  EMMY_SIM_SITE void operator=(T value) { array_.write(index_, value, EMMY_SIM_CALLER); }
  EMMY_SIM_SITE void operator=(const SharedElement& other) {
    array_.write(index_, other.array_.read(other.index_, EMMY_SIM_CALLER), EMMY_SIM_CALLER);
  }
  EMMY_SIM_SITE void operator+=(T value) { update(value, [](T a, T b) { return static_cast<T>(a + b); }, EMMY_SIM_CALLER); }
  EMMY_SIM_SITE void operator-=(T value) { update(value, [](T a, T b) { return static_cast<T>(a - b); }, EMMY_SIM_CALLER); }
  EMMY_SIM_SITE void operator*=(T value) { update(value, [](T a, T b) { return static_cast<T>(a * b); }, EMMY_SIM_CALLER); }
  EMMY_SIM_SITE void operator/=(T value) { update(value, [](T a, T b) { return static_cast<T>(a / b); }, EMMY_SIM_CALLER); }

private:
  template <class Combine>
  void update(T value, Combine combine, uintptr_t site) {
    array_.write(index_, combine(array_.read(index_, site), value), site);
  }

  SharedArray<T, Count>& array_;
  int64_t index_;
};
#undef EMMY_SIM_SITE
#undef EMMY_SIM_CALLER

// An integer min or max of a value and a shared element: the generated code's templates take two of one
// type, and the element converts to the integer as well as to float and double (found by ADL).
template <class T, int64_t Count, class = std::enable_if_t<std::is_integral_v<T>>>
T emmy_max(T a, const SharedElement<T, Count>& element) {
  const T b = element;
  return a < b ? b : a;
}
template <class T, int64_t Count, class = std::enable_if_t<std::is_integral_v<T>>>
T emmy_min(T a, const SharedElement<T, Count>& element) {
  const T b = element;
  return b < a ? b : a;
}

// A shared array of EMMY_SHARED: its elements and, for each, a record of the accesses since the last
// barrier (SharedAccesses). An aggregate, so that the static local it is gets constant-initialized.
#if defined(EMMY_PROFILE)
#define EMMY_SIM_SITE_OF_CALLER __attribute__((noinline))
#define EMMY_SIM_SITE_OF_ACCESS __attribute__((always_inline)) inline
#else
#define EMMY_SIM_SITE_OF_CALLER
#define EMMY_SIM_SITE_OF_ACCESS
#endif
template <class T, int64_t Count>
struct SharedArray {
  const char* name;
  T elements[Count];
  SharedAccesses accesses[Count];
  // The elements an index may reach: Count, or those of a launch for an array sized at launch.
  int64_t sized = Count;

  SharedElement<T, Count> operator[](int64_t index) { return {*this, index}; }

  // EMMY_SHARED_SIZED_AT_LAUNCH: `elements` from byte `offset` of the shared memory the launch sized.
  void sizeAtLaunch(int64_t offset, int64_t elements) {
    const int64_t given = static_cast<int64_t>(launchSharedBytes);
    if (elements > Count || offset + elements * int64_t{sizeof(T)} > given)
      scheduler.stopAtSharedBeyondLaunch(name, offset, elements * int64_t{sizeof(T)}, given);
    sized = elements;
  }

  // `elements` elements from `source` into the elements from `index` on, when a wait covers the copy.
  // Checked as a write now too: the copy may land at any time until then, and is not ordered with the
  // reads before it, the running thread's own included (only a barrier is).
  void startCopy(int64_t index, const void* source, int64_t elements) {
    for (int64_t element = 0; element < elements; ++element)
      scheduler.noteCopyStart(accesses, name, index + element, sized);
    PendingCopy copy{accesses, name, index, sized, &this->elements[index], 0, static_cast<uint8_t>(elements),
                     static_cast<uint8_t>(elements * sizeof(T)), {}};
    std::memcpy(copy.value, source, copy.bytes);
    scheduler.startCopy(copy);
  }

  // `site`: where the access is in the kernel, when profiling (then inlined, see SharedElement).
  EMMY_SIM_SITE_OF_ACCESS T read(int64_t index, uintptr_t site) {
    UnprofiledScope unprofiled;
    scheduler.noteSharedAccess(Access::Read, accesses, name, index, sized);
    if constexpr (kProfiling) scheduler.noteProfiledSharedAccess(site, this, index * int64_t{sizeof(T)}, sizeof(T), Access::Read);
    return elements[index];
  }
  EMMY_SIM_SITE_OF_ACCESS void write(int64_t index, const T& value, uintptr_t site) {
    UnprofiledScope unprofiled;
    scheduler.noteSharedAccess(Access::Write, accesses, name, index, sized);
    if constexpr (kProfiling) scheduler.noteProfiledSharedAccess(site, this, index * int64_t{sizeof(T)}, sizeof(T), Access::Write);
    elements[index] = value;
  }
  // emmy_copy_async of `value` into element `index` (Scheduler::startCopy): profiled now, at its call.
  EMMY_SIM_SITE_OF_CALLER void copyLater(int64_t index, const T& value) {
    UnprofiledScope unprofiled;
    if constexpr (kProfiling) {
      const auto site = reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1;  // in the call instruction
      scheduler.noteProfiledSharedAccess(site, this, index * int64_t{sizeof(T)}, sizeof(T), Access::Write);
    }
    startCopy(index, &value, 1);
  }
  // The 16 bytes at `source` (global memory) into the elements from `index` on (a cp.async of 16 bytes,
  // Scheduler::startCopy; profiled here, since memcpy is not instrumented).
  EMMY_SIM_SITE_OF_CALLER void copyVector(int64_t index, const void* source) {
    UnprofiledScope unprofiled;  // the copy too: the compiler may expand memcpy into loads
    constexpr int64_t lanes = 16 / sizeof(T);
    if constexpr (kProfiling) {
      const auto site = reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1;  // in the call instruction
      scheduler.noteGlobalAccess(site, source, 16, Access::Read);
      scheduler.noteProfiledSharedAccess(site, this, index * int64_t{sizeof(T)}, 16, Access::Write);
    }
    startCopy(index, source, lanes);
  }
  // `bytes` (8 or 16) bytes from element `index` on into a thread's `local` array: one vector load of
  // emmy_load_shared_vector, checked as a read of each element and profiled as one access at its call.
  // The hardware needs the address aligned to `bytes`.
  EMMY_SIM_SITE_OF_CALLER void readVector(int64_t index, void* local, int bytes) {
    UnprofiledScope unprofiled;
    const int64_t lanes = bytes / int64_t{sizeof(T)};
    const int64_t offset = index * int64_t{sizeof(T)};
    if (offset % bytes != 0) scheduler.stopAtMisaligned("reads emmy_load_shared_vector()", name, index, offset, bytes);
    for (int64_t lane = 0; lane < lanes; ++lane) scheduler.noteSharedAccess(Access::Read, accesses, name, index + lane, sized);
    if constexpr (kProfiling) {
      const auto site = reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1;  // in the call instruction
      scheduler.noteProfiledSharedAccess(site, this, offset, bytes, Access::Read);
    }
    std::memcpy(local, &elements[index], bytes);
  }
  // The other way, for emmy_store_shared_vector: checked as a write of each element.
  EMMY_SIM_SITE_OF_CALLER void writeVector(int64_t index, const void* local, int bytes) {
    UnprofiledScope unprofiled;
    const int64_t lanes = bytes / int64_t{sizeof(T)};
    const int64_t offset = index * int64_t{sizeof(T)};
    if (offset % bytes != 0) scheduler.stopAtMisaligned("writes emmy_store_shared_vector()", name, index, offset, bytes);
    for (int64_t lane = 0; lane < lanes; ++lane) scheduler.noteSharedAccess(Access::Write, accesses, name, index + lane, sized);
    if constexpr (kProfiling) {
      const auto site = reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1;  // in the call instruction
      scheduler.noteProfiledSharedAccess(site, this, offset, bytes, Access::Write);
    }
    std::memcpy(&elements[index], local, bytes);
  }
  // The 16 bytes from element `index` on, which a lane of an ldmatrix reads as one row of a matrix:
  // checked as a read of each element, by the lane that passed the row; profiled as one 16-byte read at
  // `site`. The hardware needs the row 16-byte aligned (from the array's start, which the profile too
  // takes to be aligned).
  const T* readMatrixRow(int64_t index, uintptr_t site) {
    UnprofiledScope unprofiled;
    constexpr int64_t lanes = 16 / sizeof(T);
    const int64_t offset = index * int64_t{sizeof(T)};
    if (offset % 16 != 0) scheduler.stopAtMisaligned("reads a row of emmy_ldmatrix()", name, index, offset, 16);
    for (int64_t lane = 0; lane < lanes; ++lane) scheduler.noteSharedAccess(Access::Read, accesses, name, index + lane, sized);
    if constexpr (kProfiling) scheduler.noteProfiledSharedAccess(site, this, offset, 16, Access::Read);
    return &elements[index];
  }
};

// ---------------------------------------------------------------------------------------------------
// Tensor cores: ldmatrix and mma.sync.m16n8k16, warp-collective like a shuffle (Scheduler::warpCollective:
// the last lane to arrive computes for the warp). The fragment layouts are the PTX ISA's (section numbers
// of PTX ISA 9.1; they shift between versions, the anchors of docs.nvidia.com/cuda/parallel-thread-execution
// do not), and tests/sim/tensor_cores_main.cpp checks them element by element against its tables.
// ---------------------------------------------------------------------------------------------------

// What a lane passes to ldmatrix: where its fragments go and its row (8 16-bit elements), or nullptr for
// a lane past the rows of the matrices loaded.
struct LdmatrixOperands {
  uint32_t* fragment;
  const void* row;
};

// ldmatrix.sync.aligned.m8n8.x{Count}{.trans}.shared.b16 (9.7.14.5.15, #warp-level-matrix-instructions-
// ldmatrix): lanes 8m .. 8m+7 address the rows 0..7 of matrix m, and register m of every lane receives
// matrix m's fragment as Figure 104 lays it out: lane L holds row L/4, columns 2*(L%4) and 2*(L%4)+1
// (lower-numbered column in the low 16 bits). .trans loads the matrix "in column-major format": the
// same layout of the transpose, so lane L holds rows 2*(L%4) and 2*(L%4)+1 of column L/4.
template <int Count, bool Transpose>
inline void ldmatrixWarp(void* const* operands) {
  uint16_t rows[Count][8][8];  // [matrix][row][column]
  for (int lane = 0; lane < 8 * Count; ++lane)
    std::memcpy(rows[lane / 8][lane % 8], static_cast<const LdmatrixOperands*>(operands[lane])->row, 16);
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    uint32_t* fragment = static_cast<const LdmatrixOperands*>(operands[lane])->fragment;
    const unsigned row = lane / 4, column = 2 * (lane % 4);
    for (int m = 0; m < Count; ++m) {
      const uint16_t low = Transpose ? rows[m][column][row] : rows[m][row][column];
      const uint16_t high = Transpose ? rows[m][column + 1][row] : rows[m][row][column + 1];
      fragment[m] = low | uint32_t{high} << 16;
    }
  }
}

// What a lane passes to mma: its accumulators (C in, D out) and its A and B fragments.
struct MmaOperands {
  float* d;
  const uint32_t* a;
  const uint32_t* b;
};

template <class T>
inline float narrowFloatBits(uint32_t bits) {
  if constexpr (std::is_same_v<T, __half>)
    return halfBitsToFloat(static_cast<uint16_t>(bits));
  else
    return bfloat16BitsToFloat(static_cast<uint16_t>(bits));
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 (9.7.14.5.14, #warp-level-matrix-
// instructions-mma), fragments as 9.7.14.5.8 (#warp-level-matrix-fragment-mma-16816-float) lays them out,
// with groupID g = lane/4 and threadID_in_group t = lane%4, each register's lower-numbered element in its
// low 16 bits:
//   A (16x16, row): a0,a1 (row g, columns 2t, 2t+1); a2,a3 (row g+8, same); a4,a5 (row g, columns
//     2t+8, 2t+9); a6,a7 (row g+8, same): register i holds a(2i), a(2i+1).
//   B (16x8, col): b0,b1 (rows k = 2t, 2t+1, column g); b2,b3 (rows 2t+8, 2t+9, column g).
//   C, D (16x8 f32): c0,c1 (row g, columns 2t, 2t+1); c2,c3 (row g+8, same).
// The ISA leaves the accumulation order and rounding unspecified; here each element of D is
// c + a(row,0)*b(0,col) + ... + a(row,15)*b(15,col), added in k order in float. Every product of two f16
// or bf16 values is exact in float (11 + 11 and 8 + 8 significant bits), so a contracted multiply-add
// would give the same sums; a result whose terms are all exact (small integers) is exactly the GPU's.
template <class T>
inline void mmaWarp(void* const* operands) {
  float a[16][16];              // [row][k]
  alignas(16) float b[16][8];   // [k][column]
  alignas(16) float d[16][8];   // [row][column]: C, then D
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    const MmaOperands& lanes = *static_cast<const MmaOperands*>(operands[lane]);
    const unsigned g = lane / 4, t = lane % 4;
    const auto pair = [](float& first, float& second, uint32_t bits) {
      first = narrowFloatBits<T>(bits & 0xffffu);
      second = narrowFloatBits<T>(bits >> 16);
    };
    pair(a[g][2 * t], a[g][2 * t + 1], lanes.a[0]);
    pair(a[g + 8][2 * t], a[g + 8][2 * t + 1], lanes.a[1]);
    pair(a[g][2 * t + 8], a[g][2 * t + 9], lanes.a[2]);
    pair(a[g + 8][2 * t + 8], a[g + 8][2 * t + 9], lanes.a[3]);
    pair(b[2 * t][g], b[2 * t + 1][g], lanes.b[0]);
    pair(b[2 * t + 8][g], b[2 * t + 9][g], lanes.b[1]);
    for (unsigned i = 0; i < 4; ++i) d[g + 8 * (i / 2)][2 * t + i % 2] = lanes.d[i];
  }
  // A row of D at a time, its 8 sums four at once (GCC's and Clang's vector extension: SSE on x86-64,
  // each float rounded as a scalar would be), each sum in k order.
  typedef float Float4 __attribute__((vector_size(16)));
  for (unsigned row = 0; row < 16; ++row) {
    Float4 low, high;
    std::memcpy(&low, &d[row][0], sizeof low);
    std::memcpy(&high, &d[row][4], sizeof high);
    for (unsigned k = 0; k < 16; ++k) {
      const float x = a[row][k];
      const Float4 broadcast = {x, x, x, x};
      Float4 left, right;
      std::memcpy(&left, &b[k][0], sizeof left);
      std::memcpy(&right, &b[k][4], sizeof right);
      low += broadcast * left;
      high += broadcast * right;
    }
    std::memcpy(&d[row][0], &low, sizeof low);
    std::memcpy(&d[row][4], &high, sizeof high);
  }
  for (unsigned lane = 0; lane < kWarpSize; ++lane) {
    float* out = static_cast<const MmaOperands*>(operands[lane])->d;
    const unsigned g = lane / 4, t = lane % 4;
    for (unsigned i = 0; i < 4; ++i) out[i] = d[g + 8 * (i / 2)][2 * t + i % 2];
  }
}

}  // namespace emmy_sim::detail

// How many times EMMY_LAUNCH ran (valid launches or not): a test sees that a host function launched nothing.
namespace emmy_sim {
inline unsigned long long launchCount() { return detail::launchCount; }
}  // namespace emmy_sim

// ---------------------------------------------------------------------------------------------------
// Device built-ins
// ---------------------------------------------------------------------------------------------------

inline const uint3& threadIdx = emmy_sim::detail::currentThreadIdx;
inline const uint3& blockIdx = emmy_sim::detail::currentBlockIdx;
inline const dim3& blockDim = emmy_sim::detail::currentBlockDim;
inline const dim3& gridDim = emmy_sim::detail::currentGridDim;

inline void __syncthreads() {
  emmy_sim::detail::memoryBarrier();
  emmy_sim::detail::scheduler.arriveAtBarrier();
  emmy_sim::detail::memoryBarrier();
}

inline unsigned __activemask() { return emmy_sim::detail::scheduler.activeLaneMask(); }

#define EMMY_SIM_SHUFFLE(function, mode)                                                                             \
  template <class T>                                                                                                 \
  inline T function(unsigned mask, T value, int operand, int width = warpSize) {                                     \
    emmy_sim::detail::memoryBarrier();                                                                               \
    const uint64_t received = emmy_sim::detail::scheduler.shuffle(                                                   \
        #function, emmy_sim::detail::ShuffleMode::mode, mask, emmy_sim::detail::shuffleBits(value), operand, width); \
    emmy_sim::detail::memoryBarrier();                                                                               \
    return emmy_sim::detail::shuffleValue<T>(received);                                                              \
  }
EMMY_SIM_SHUFFLE(__shfl_sync, Index)
EMMY_SIM_SHUFFLE(__shfl_up_sync, Up)
EMMY_SIM_SHUFFLE(__shfl_down_sync, Down)
EMMY_SIM_SHUFFLE(__shfl_xor_sync, Xor)
#undef EMMY_SIM_SHUFFLE

// ldmatrix.sync.aligned.m8n8.x{Count}{.trans}.shared.b16: Count (1, 2 or 4) 8x8 matrices of 16-bit elements.
// Every lane passes `element`: the index in `shared` of the first of the 8 consecutive elements of one row,
// lanes 8*i .. 8*i+7 giving the rows 0..7 of matrix i (lanes >= 8*Count: ignored). fragment[i] receives
// matrix i's part of the lane (two 16-bit elements, the lower-numbered one in the low 16 bits).
// Warp-collective, like a shuffle; each row is checked (races, bounds, 16-byte alignment) as the reads of
// the lane that passed it, and profiled as one 16-byte read at the call (hence not inlined then).
template <int Count, bool Transpose, typename T, int64_t N>
EMMY_SIM_SITE_OF_CALLER void emmy_ldmatrix(uint32_t* fragment, emmy_sim::detail::SharedArray<T, N>& shared,
                                           int64_t element) {
  static_assert(Count == 1 || Count == 2 || Count == 4, "ldmatrix loads 1, 2 or 4 matrices");
  static_assert(sizeof(T) == 2, "ldmatrix .b16 loads 16-bit elements");
  using namespace emmy_sim::detail;
  uintptr_t site = 0;
  if constexpr (kProfiling) site = reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1;  // the call
  LdmatrixOperands operands{fragment, nullptr};
  if (scheduler.currentLane() < 8u * Count)
    operands.row = shared.readMatrixRow(element, site);
  else if constexpr (kProfiling)
    scheduler.noteProfiledSharedAccess(site, &shared, 0, 16, Access::Read, false);  // active, without a row
  memoryBarrier();
  scheduler.warpCollective("emmy_ldmatrix", &ldmatrixWarp<Count, Transpose>, &operands);
  memoryBarrier();
}

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32 with d as both C and D: d[0..3] += A*B,
// a[0..3] and b[0..1] the lane's A and B fragments (pairs of T in uint32_t, lower-numbered element low).
// Warp-collective, like a shuffle (emmy_sim::detail::mmaWarp has the layouts and the order of the sums).
template <typename T>  // __half or __nv_bfloat16
inline void emmy_mma_m16n8k16(float* d, const uint32_t* a, const uint32_t* b) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "mma of f16 or bf16");
  emmy_sim::detail::MmaOperands operands{d, a, b};
  emmy_sim::detail::memoryBarrier();
  emmy_sim::detail::scheduler.warpCollective("emmy_mma_m16n8k16", &emmy_sim::detail::mmaWarp<T>, &operands);
  emmy_sim::detail::memoryBarrier();
}

// Runs the whole grid before returning. Every thread calls the kernel with its own copies of the
// arguments, evaluated once; their names as written name the buffers in reports of faults. The stream is
// accepted and ignored: everything is synchronous.
#define EMMY_LAUNCH(kernel, grid, block, stream, ...)                                                      \
  do {                                                                                                     \
    (void)(stream);                                                                                        \
    ::emmy_sim::detail::launch(#kernel, #__VA_ARGS__, (grid), (block), kernel, ##__VA_ARGS__);             \
  } while (0)
#define EMMY_LAUNCH_SIZED(kernel, grid, block, bytes, stream, ...)                                          \
  do {                                                                                                     \
    (void)(stream);                                                                                        \
    ::emmy_sim::detail::launchSized(#kernel, #__VA_ARGS__, (grid), (block), (bytes), kernel, ##__VA_ARGS__); \
  } while (0)
#define EMMY_LAUNCH_SHARED_LIMIT(kernel) ::emmy_sim::detail::launchSharedLimit()
#define EMMY_INDEX_LIMIT ::emmy_sim::detail::indexLimit()
// The bytes of shared memory the launch sized (%dynamic_smem_size).
inline unsigned emmy_launch_shared_bytes() { return static_cast<unsigned>(emmy_sim::detail::launchSharedBytes); }

// The callbacks of the compiler's -fsanitize=thread instrumentation, with which `emmy check --profile`
// compiles (without the ThreadSanitizer runtime): every load and store of the program calls one, and
// those of a kernel to a global buffer are profiled. The call instruction (the byte before the return
// address) is the access's site. Weak,
// as every translation unit that includes this header defines them; not instrumented themselves, and
// what they call is kept from calling them again.
#if defined(EMMY_PROFILE)
namespace emmy_sim::detail {
__attribute__((no_sanitize("thread"))) inline void profileGlobalAccess(uintptr_t site, const void* address, uint32_t bytes,
                                                                        Access access) {
  if (inSimulationCode) return;
  inSimulationCode = true;
  scheduler.noteGlobalAccess(site, address, bytes, access);
  inSimulationCode = false;
}
}  // namespace emmy_sim::detail
#define EMMY_SIM_PROFILE_CALLBACK(name, bytes, access)                                                     \
  extern "C" __attribute__((weak, no_sanitize("thread"), noinline)) void name(void* address) {            \
    emmy_sim::detail::profileGlobalAccess(reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1, address, \
                                          bytes, emmy_sim::detail::Access::access);                        \
  }
#define EMMY_SIM_PROFILE_CALLBACKS(bytes)                                      \
  EMMY_SIM_PROFILE_CALLBACK(__tsan_read##bytes, bytes, Read)                   \
  EMMY_SIM_PROFILE_CALLBACK(__tsan_write##bytes, bytes, Write)                 \
  EMMY_SIM_PROFILE_CALLBACK(__tsan_unaligned_read##bytes, bytes, Read)         \
  EMMY_SIM_PROFILE_CALLBACK(__tsan_unaligned_write##bytes, bytes, Write)
EMMY_SIM_PROFILE_CALLBACKS(1)
EMMY_SIM_PROFILE_CALLBACKS(2)
EMMY_SIM_PROFILE_CALLBACKS(4)
EMMY_SIM_PROFILE_CALLBACKS(8)
EMMY_SIM_PROFILE_CALLBACKS(16)
#undef EMMY_SIM_PROFILE_CALLBACKS
#undef EMMY_SIM_PROFILE_CALLBACK
extern "C" __attribute__((weak, no_sanitize("thread"), noinline)) void __tsan_read_range(void* address, unsigned long bytes) {
  emmy_sim::detail::profileGlobalAccess(reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1, address,
                                        static_cast<uint32_t>(bytes), emmy_sim::detail::Access::Read);
}
extern "C" __attribute__((weak, no_sanitize("thread"), noinline)) void __tsan_write_range(void* address, unsigned long bytes) {
  emmy_sim::detail::profileGlobalAccess(reinterpret_cast<uintptr_t>(__builtin_return_address(0)) - 1, address,
                                        static_cast<uint32_t>(bytes), emmy_sim::detail::Access::Write);
}
extern "C" __attribute__((weak, no_sanitize("thread"))) void __tsan_init() {}
#endif
