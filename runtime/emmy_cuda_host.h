// The CUDA runtime API that a generated host function uses (cuda_contract.md), on the driver API, for
// running the host function on a GPU without the CUDA runtime library. A generated NAME.cu compiles
// against it as host C++ unchanged:
//
//   c++ -std=c++17 -O1 -DEMMY_HOST_ONLY -include emmy_cuda_host.h -x c++ harness.cpp -ldl
//
// EMMY_HOST_ONLY leaves the kernels' definitions out of NAME.cu; their code comes from NVRTC's output of
// the same text, loaded as a module (emmy_host_start), and EMMY_LAUNCH launches a kernel by name from
// it. Self-contained (C++17, POSIX and emmy_cuda_driver.h beside it) and all inline, like the
// simulation header, because it is compiled in a temporary folder. runtime/ARCHITECTURE.md says why
// the host function runs this way.
#pragma once

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emmy_cuda_driver.h"

// ---- What the generated text needs to parse as host C++ ---------------------------------------------------

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

// Storage types only: the host function passes pointers to them and never computes with them, so the
// prelude's conversions are declared and not defined (a use would fail to link, loudly).
struct __half {
  unsigned short bits;
};
struct __nv_bfloat16 {
  unsigned short bits;
};
float __half2float(__half);
__half __float2half_rn(float);
float __bfloat162float(__nv_bfloat16);
__nv_bfloat16 __float2bfloat16_rn(float);

typedef emmy_cuda::CUstream cudaStream_t;
typedef int cudaError_t;  // a CUresult
constexpr cudaError_t cudaSuccess = 0;

// ---- The runtime's state: one device, one module, one stream per program ---------------------------------

// The harness's exit status when the runtime itself fails (no device, a module the driver rejects, ...).
constexpr int kEmmyHostRuntimeFailed = 5;

struct EmmyHostKernel {
  const char* name;  // the launch's #kernel, a string literal
  emmy_cuda::CUfunction function;
};

struct EmmyHost {
  emmy_cuda::Driver driver;
  emmy_cuda::CUdevice device = 0;
  emmy_cuda::CUmodule module = nullptr;
  emmy_cuda::CUstream stream = nullptr;
  cudaError_t lastError = cudaSuccess;
  // Wait for every launch to finish, so that a kernel's fault is reported as that kernel's.
  bool synchronizeLaunches = true;
  // Stream-ordered allocation from the device's default pool, where the driver has it (some
  // virtualised drivers do not); else cuMemAlloc and a synchronised cuMemFree.
  bool memoryPool = true;
  EmmyHostKernel kernels[64];
  int kernelCount = 0;
};

inline EmmyHost& emmy_host() {
  static EmmyHost host;
  return host;
}

[[noreturn]] inline void emmy_host_fail(const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  fputs("emmy runtime: ", stdout);
  vprintf(format, arguments);
  fputs("\n", stdout);
  va_end(arguments);
  fflush(stdout);
  exit(kEmmyHostRuntimeFailed);
}

// A launch that cannot match its kernel is a bug in Emmy, not the user's: abort, with the reason.
[[noreturn]] inline void emmy_host_bug(const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  fputs("emmy runtime: internal error (a bug in Emmy): ", stdout);
  vprintf(format, arguments);
  fputs("\n", stdout);
  va_end(arguments);
  fflush(stdout);
  abort();
}

inline const char* emmy_host_describe(emmy_cuda::CUresult result) {
  static thread_local char text[256];
  if (emmy_host().driver.cuGetErrorName == nullptr)  // not loaded (yet): only the number
    snprintf(text, sizeof text, "CUDA error %d", result);
  else
    emmy_cuda::describeResult(emmy_host().driver, result, text, sizeof text);
  return text;
}

inline void emmy_host_check(emmy_cuda::CUresult result, const char* what) {
  if (result != emmy_cuda::CUDA_SUCCESS) emmy_host_fail("%s: %s", what, emmy_host_describe(result));
}

// Loads the driver, makes device 0's primary context current, loads the module (a cubin, or PTX for the
// driver to compile) from `modulePath`, and creates the stream the host function runs on.
inline void emmy_host_start(const char* modulePath) {
  EmmyHost& host = emmy_host();
  char why[512];
  if (!emmy_cuda::loadDriver(host.driver, why, sizeof why)) emmy_host_fail("%s", why);
  const emmy_cuda::Driver& cu = host.driver;
  emmy_host_check(cu.cuInit(0), "cuInit");
  emmy_host_check(cu.cuDeviceGet(&host.device, 0), "cuDeviceGet");
  emmy_cuda::CUcontext context = nullptr;
  emmy_host_check(cu.cuDevicePrimaryCtxRetain(&context, host.device), "cuDevicePrimaryCtxRetain");
  emmy_host_check(cu.cuCtxSetCurrent(context), "cuCtxSetCurrent");

  FILE* file = fopen(modulePath, "rb");
  if (!file) emmy_host_fail("cannot read the module %s", modulePath);
  fseek(file, 0, SEEK_END);
  long bytes = ftell(file);
  fseek(file, 0, SEEK_SET);
  char* image = static_cast<char*>(calloc(static_cast<size_t>(bytes) + 1, 1));  // PTX must end with a NUL
  if (!image || fread(image, 1, static_cast<size_t>(bytes), file) != static_cast<size_t>(bytes))
    emmy_host_fail("cannot read the module %s", modulePath);
  fclose(file);
  emmy_host_check(cu.cuModuleLoadData(&host.module, image), "cuModuleLoadData");
  free(image);

  emmy_host_check(cu.cuStreamCreate(&host.stream, 0), "cuStreamCreate");
  // Temporaries come from cudaMallocAsync on every call: the pool keeps what they free, as PyTorch's
  // caching allocator does, instead of giving it back to the driver at each synchronisation.
  int pools = 0;
  emmy_cuda::CUmemoryPool pool = nullptr;
  unsigned long long keepEverything = ~0ull;
  host.memoryPool =
      cu.cuDeviceGetAttribute(&pools, emmy_cuda::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, host.device) ==
          emmy_cuda::CUDA_SUCCESS &&
      pools != 0 && cu.cuDeviceGetDefaultMemPool(&pool, host.device) == emmy_cuda::CUDA_SUCCESS &&
      cu.cuMemPoolSetAttribute(pool, emmy_cuda::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keepEverything) ==
          emmy_cuda::CUDA_SUCCESS;
}

// ---- The CUDA runtime API of the host function ------------------------------------------------------------

inline cudaError_t emmy_host_record(emmy_cuda::CUresult result) {
  if (result != emmy_cuda::CUDA_SUCCESS) emmy_host().lastError = result;
  return result;
}

inline cudaError_t cudaGetLastError() {
  cudaError_t error = emmy_host().lastError;
  emmy_host().lastError = cudaSuccess;
  return error;
}
inline cudaError_t cudaPeekAtLastError() { return emmy_host().lastError; }
inline const char* cudaGetErrorString(cudaError_t error) { return emmy_host_describe(error); }

inline cudaError_t cudaMallocAsync(void** pointer, size_t bytes, cudaStream_t stream) {
  EmmyHost& host = emmy_host();
  emmy_cuda::CUdeviceptr device = 0;
  emmy_cuda::CUresult result = emmy_cuda::CUDA_ERROR_NOT_SUPPORTED;
  if (host.memoryPool) result = host.driver.cuMemAllocAsync(&device, bytes, stream);
  if (result == emmy_cuda::CUDA_ERROR_NOT_SUPPORTED) {
    host.memoryPool = false;
    result = host.driver.cuMemAlloc_v2(&device, bytes);
  }
  *pointer = reinterpret_cast<void*>(static_cast<uintptr_t>(device));
  return emmy_host_record(result);
}

inline cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  EmmyHost& host = emmy_host();
  emmy_cuda::CUdeviceptr device = static_cast<emmy_cuda::CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer));
  if (host.memoryPool) return emmy_host_record(host.driver.cuMemFreeAsync(device, stream));
  // Without a pool, the memory must outlive the kernels queued on the stream that use it.
  emmy_cuda::CUresult result = host.driver.cuStreamSynchronize(stream);
  if (result == emmy_cuda::CUDA_SUCCESS) result = host.driver.cuMemFree_v2(device);
  return emmy_host_record(result);
}

// A launch whose arguments do not match its kernel's parameters, one for one and byte for byte, is a bug in
// Emmy. Checked where the driver can tell (CUDA 12.4 and newer).
inline void emmy_host_check_parameters(const char* name, emmy_cuda::CUfunction function, const size_t* sizes, size_t count) {
  const emmy_cuda::Driver& cu = emmy_host().driver;
  if (cu.cuFuncGetParamInfo == nullptr) return;
  size_t offset = 0, size = 0;
  for (size_t k = 0; k < count; ++k) {
    if (cu.cuFuncGetParamInfo(function, k, &offset, &size) != emmy_cuda::CUDA_SUCCESS)
      emmy_host_bug("kernel %s is launched with %zu arguments but has %zu parameters", name, count, k);
    if (size != sizes[k])
      emmy_host_bug("argument %zu of kernel %s has %zu bytes but the parameter has %zu", k, name, sizes[k], size);
  }
  if (cu.cuFuncGetParamInfo(function, count, &offset, &size) == emmy_cuda::CUDA_SUCCESS)
    emmy_host_bug("kernel %s is launched with %zu arguments but has more parameters", name, count);
}

// The kernel `name` of the module, looked up (and its parameters checked) at its first launch.
inline emmy_cuda::CUfunction emmy_host_function(const char* name, const size_t* sizes, size_t count) {
  EmmyHost& host = emmy_host();
  for (int k = 0; k < host.kernelCount; ++k)
    if (strcmp(host.kernels[k].name, name) == 0) return host.kernels[k].function;
  emmy_cuda::CUfunction function = nullptr;
  emmy_cuda::CUresult found = host.driver.cuModuleGetFunction(&function, host.module, name);
  if (found != emmy_cuda::CUDA_SUCCESS) emmy_host_bug("the module has no kernel %s: %s", name, emmy_host_describe(found));
  emmy_host_check_parameters(name, function, sizes, count);
  if (host.kernelCount < static_cast<int>(sizeof host.kernels / sizeof host.kernels[0]))
    host.kernels[host.kernelCount++] = {name, function};
  return function;
}

inline void emmy_host_launch_packed(const char* name, dim3 grid, dim3 block, int64_t sharedBytes, cudaStream_t stream,
                                    void** arguments, const size_t* sizes, size_t count) {
  EmmyHost& host = emmy_host();
  emmy_cuda::CUfunction function = emmy_host_function(name, sizes, count);
  // Beyond 48 KiB, a kernel takes shared memory sized at launch only where it opts in.
  emmy_cuda::CUresult result =
      sharedBytes == 0 ? emmy_cuda::CUDA_SUCCESS
                       : host.driver.cuFuncSetAttribute(function, emmy_cuda::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                        static_cast<int>(sharedBytes));
  if (result == emmy_cuda::CUDA_SUCCESS)
    result = host.driver.cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                        static_cast<unsigned>(sharedBytes), stream, arguments, nullptr);
  if (result == emmy_cuda::CUDA_SUCCESS && host.synchronizeLaunches) result = host.driver.cuStreamSynchronize(stream);
  emmy_host_record(result);
}

// cuLaunchKernel's arguments: a pointer to each value, and each one's size (for the parameter check).
template <size_t Count>
struct EmmyHostArguments {
  void* pointers[Count];
  size_t sizes[Count];
};

template <typename... Arguments>
inline EmmyHostArguments<sizeof...(Arguments)> emmy_host_pack(Arguments&... arguments) {
  return {{static_cast<void*>(&arguments)...}, {sizeof(Arguments)...}};
}

// The arguments are the host function's variables, of the kernel's parameter types (the emitter prints
// both lists from the same parameters), copied here so that they live until the launch has read them.
template <typename... Arguments>
inline void emmy_host_launch(const char* name, dim3 grid, dim3 block, int64_t sharedBytes, cudaStream_t stream,
                             Arguments... arguments) {
  EmmyHostArguments<sizeof...(Arguments)> packed = emmy_host_pack(arguments...);
  emmy_host_launch_packed(name, grid, block, sharedBytes, stream, packed.pointers, packed.sizes, sizeof...(Arguments));
}

// The device's most shared memory per block (opting in), less what the kernel `name` declares itself; 0
// when the driver cannot say, and the kernel then reads its rows from global memory.
inline int64_t emmy_host_launch_shared_limit(const char* name) {
  EmmyHost& host = emmy_host();
  emmy_cuda::CUfunction function = nullptr;
  int most = 0, declared = 0;
  if (host.driver.cuModuleGetFunction(&function, host.module, name) != emmy_cuda::CUDA_SUCCESS ||
      host.driver.cuDeviceGetAttribute(&most, emmy_cuda::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                       host.device) != emmy_cuda::CUDA_SUCCESS ||
      host.driver.cuFuncGetAttribute(&declared, emmy_cuda::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function) !=
          emmy_cuda::CUDA_SUCCESS)
    return 0;
  return static_cast<int64_t>(most) - declared;
}

#define EMMY_LAUNCH(kernel, grid, block, stream, ...) emmy_host_launch(#kernel, (grid), (block), 0, (stream), __VA_ARGS__)
#define EMMY_LAUNCH_SIZED(kernel, grid, block, bytes, stream, ...) \
  emmy_host_launch(#kernel, (grid), (block), (bytes), (stream), __VA_ARGS__)
#define EMMY_LAUNCH_SHARED_LIMIT(kernel) emmy_host_launch_shared_limit(#kernel)

// ---- What the harness of `emmy run` and `emmy bench` uses ---------------------------------------------------

inline void* emmy_host_allocate(int64_t bytes, int fill) {
  const emmy_cuda::Driver& cu = emmy_host().driver;
  emmy_cuda::CUdeviceptr device = 0;
  // cuMemAlloc rejects 0 bytes; an empty tensor still gets a valid, distinct pointer.
  size_t size = bytes > 0 ? static_cast<size_t>(bytes) : 1;
  emmy_host_check(cu.cuMemAlloc_v2(&device, size), "cuMemAlloc");
  emmy_host_check(cu.cuMemsetD8Async(device, static_cast<unsigned char>(fill), size, emmy_host().stream), "cuMemsetD8Async");
  emmy_host_check(cu.cuStreamSynchronize(emmy_host().stream), "cuStreamSynchronize");
  return reinterpret_cast<void*>(static_cast<uintptr_t>(device));
}

inline void emmy_host_copy_to_device(void* device, const void* host, int64_t bytes) {
  if (bytes <= 0) return;
  emmy_host_check(emmy_host().driver.cuMemcpyHtoD_v2(static_cast<emmy_cuda::CUdeviceptr>(reinterpret_cast<uintptr_t>(device)),
                                                     host, static_cast<size_t>(bytes)),
                  "cuMemcpyHtoD");
}

inline void emmy_host_copy_to_host(void* host, const void* device, int64_t bytes) {
  if (bytes <= 0) return;
  emmy_host_check(emmy_host().driver.cuMemcpyDtoH_v2(host, static_cast<emmy_cuda::CUdeviceptr>(reinterpret_cast<uintptr_t>(device)),
                                                     static_cast<size_t>(bytes)),
                  "cuMemcpyDtoH");
}

// Waits for everything on the stream; a kernel's fault shows here at the latest.
inline cudaError_t emmy_host_synchronize() { return emmy_host_record(emmy_host().driver.cuStreamSynchronize(emmy_host().stream)); }

// Times `call` (which runs the host function and returns its status) with CUDA events: `warmup` untimed
// calls, then `repetitions` timed ones, each preceded, outside the events, by writing `flushBytes` bytes
// (twice the L2 cache, say; 0 for none) so that no input is still in the cache. Writes the times in
// milliseconds to `timesPath`, one a line. Returns the first non-zero status of `call`, or 0; a failure
// of the driver (a kernel's fault) ends the program with its name.
template <typename Call>
inline int emmy_host_time(Call call, int warmup, int repetitions, long long flushBytes, const char* timesPath) {
  EmmyHost& host = emmy_host();
  const emmy_cuda::Driver& cu = host.driver;
  host.synchronizeLaunches = false;  // launches queue up, as in the user's program
  void* flush = flushBytes > 0 ? emmy_host_allocate(flushBytes, 0) : nullptr;
  emmy_cuda::CUevent start = nullptr, stop = nullptr;
  emmy_host_check(cu.cuEventCreate(&start, 0), "cuEventCreate");
  emmy_host_check(cu.cuEventCreate(&stop, 0), "cuEventCreate");
  FILE* times = fopen(timesPath, "w");
  if (!times) emmy_host_fail("cannot write %s", timesPath);
  for (int k = 0; k < warmup + repetitions; ++k) {
    if (flush)
      emmy_host_check(cu.cuMemsetD8Async(static_cast<emmy_cuda::CUdeviceptr>(reinterpret_cast<uintptr_t>(flush)),
                                         static_cast<unsigned char>(k), static_cast<size_t>(flushBytes), host.stream),
                      "flushing the L2 cache (cuMemsetD8Async)");
    emmy_host_check(cu.cuEventRecord(start, host.stream), "cuEventRecord");
    if (int status = call()) return status;
    emmy_host_check(cu.cuEventRecord(stop, host.stream), "cuEventRecord");
    emmy_host_check(cu.cuEventSynchronize(stop), "a timed run of the kernels");
    float milliseconds = 0;
    emmy_host_check(cu.cuEventElapsedTime(&milliseconds, start, stop), "cuEventElapsedTime");
    if (k >= warmup) fprintf(times, "%.6f\n", milliseconds);
  }
  if (fclose(times) != 0) emmy_host_fail("cannot write %s", timesPath);
  return 0;
}
