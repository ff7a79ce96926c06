// The part of the CUDA driver API Emmy uses, declared here and loaded with dlopen("libcuda.so.1"), so that
// Emmy builds and starts without CUDA and links neither libcuda nor libcudart.
//
// Self-contained (C++17 and POSIX, no project header): Emmy includes it (runtime/device.cpp), and so does
// the program that runs a generated host function on the GPU (through emmy_cuda_host.h), which is
// compiled in a temporary folder. Everything is inline for the same reason. The names are cuda.h's, in
// a namespace of their own; tests/runtime_tests.cpp checks the declarations against cuda.h where the
// toolkit is installed.
#pragma once

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

namespace emmy_cuda {

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUmemPoolHandle_st* CUmemoryPool;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;

// CUdevice_attribute values (cuda.h).
enum DeviceAttribute : int {
  CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,  // kHz
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,  // kHz
  CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,  // bits
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,  // bytes
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,  // bytes
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
};
// CUfunction_attribute values (cuda.h).
enum FunctionAttribute : int {
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,              // the shared memory the kernel declares
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,  // the most a launch may size
};
// CUmemPool_attribute: how much freed memory a pool keeps instead of giving it back at a synchronisation.
constexpr int CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;

// The functions, named after the symbols they are loaded from (the _v2 ones are what cuda.h maps the plain
// names to).
struct Driver {
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuGetErrorName)(CUresult error, const char** name);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetName)(char* name, int length, CUdevice device);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
  CUresult (*cuDeviceTotalMem_v2)(size_t* bytes, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
  CUresult (*cuCtxSetCurrent)(CUcontext context);
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned int gridX, unsigned int gridY, unsigned int gridZ,
                             unsigned int blockX, unsigned int blockY, unsigned int blockZ, unsigned int sharedBytes,
                             CUstream stream, void** parameters, void** extra);
  CUresult (*cuFuncGetAttribute)(int* value, int attribute, CUfunction function);
  CUresult (*cuFuncSetAttribute)(CUfunction function, int attribute, int value);
  CUresult (*cuMemAlloc_v2)(CUdeviceptr* pointer, size_t bytes);
  CUresult (*cuMemFree_v2)(CUdeviceptr pointer);
  CUresult (*cuMemAllocAsync)(CUdeviceptr* pointer, size_t bytes, CUstream stream);
  CUresult (*cuMemFreeAsync)(CUdeviceptr pointer, CUstream stream);
  CUresult (*cuMemcpyHtoD_v2)(CUdeviceptr to, const void* from, size_t bytes);
  CUresult (*cuMemcpyDtoH_v2)(void* to, CUdeviceptr from, size_t bytes);
  CUresult (*cuMemsetD8Async)(CUdeviceptr to, unsigned char value, size_t count, CUstream stream);
  CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool* pool, CUdevice device);
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool pool, int attribute, void* value);
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned int flags);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuEventCreate)(CUevent* event, unsigned int flags);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float* milliseconds, CUevent start, CUevent end);
  // Since CUDA 12.4; null with an older driver (the runtime then skips the check it serves).
  CUresult (*cuFuncGetParamInfo)(CUfunction function, size_t index, size_t* offset, size_t* size);
};

constexpr const char* kDriverLibrary = "libcuda.so.1";

// Every symbol Driver holds, in its order: the name and whether a driver may lack it.
struct DriverSymbol {
  const char* name;
  bool optional;
};
constexpr DriverSymbol kDriverSymbols[] = {
    {"cuInit", false}, {"cuDriverGetVersion", false}, {"cuGetErrorName", false},
    {"cuGetErrorString", false}, {"cuDeviceGetCount", false}, {"cuDeviceGet", false},
    {"cuDeviceGetName", false}, {"cuDeviceGetAttribute", false}, {"cuDeviceTotalMem_v2", false},
    {"cuDevicePrimaryCtxRetain", false}, {"cuCtxSetCurrent", false}, {"cuModuleLoadData", false},
    {"cuModuleGetFunction", false}, {"cuLaunchKernel", false}, {"cuFuncGetAttribute", false},
    {"cuFuncSetAttribute", false}, {"cuMemAlloc_v2", false},
    {"cuMemFree_v2", false}, {"cuMemAllocAsync", false}, {"cuMemFreeAsync", false},
    {"cuMemcpyHtoD_v2", false}, {"cuMemcpyDtoH_v2", false}, {"cuMemsetD8Async", false},
    {"cuDeviceGetDefaultMemPool", false}, {"cuMemPoolSetAttribute", false}, {"cuStreamCreate", false},
    {"cuStreamSynchronize", false}, {"cuEventCreate", false}, {"cuEventRecord", false},
    {"cuEventSynchronize", false}, {"cuEventElapsedTime", false}, {"cuFuncGetParamInfo", true},
};
static_assert(sizeof(Driver) == sizeof(kDriverSymbols) / sizeof(kDriverSymbols[0]) * sizeof(void*),
              "kDriverSymbols lists every function of Driver, in order");

// Loads libcuda and every function of `driver`. On failure writes why into `why` (the loader's message,
// or the missing function) and returns false. The library stays loaded for the life of the process.
inline bool loadDriver(Driver& driver, char* why, size_t whySize) {
  void* library = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* error = dlerror();
    snprintf(why, whySize, "the CUDA driver cannot be loaded: %s", error ? error : kDriverLibrary);
    return false;
  }
  void* slots[sizeof(kDriverSymbols) / sizeof(kDriverSymbols[0])];
  for (size_t k = 0; k < sizeof(slots) / sizeof(slots[0]); ++k) {
    slots[k] = dlsym(library, kDriverSymbols[k].name);
    if (!slots[k] && !kDriverSymbols[k].optional) {
      snprintf(why, whySize, "the CUDA driver %s has no %s (a driver for CUDA 11.2 or newer is needed)", kDriverLibrary,
               kDriverSymbols[k].name);
      return false;
    }
  }
  // Function and object pointers have the same size and representation on every POSIX system (dlsym).
  memcpy(static_cast<void*>(&driver), slots, sizeof slots);
  return true;
}

// "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)", or "CUDA error 700" from a
// driver that cannot name it (the toolkit's stub library, say).
inline void describeResult(const Driver& driver, CUresult result, char* text, size_t textSize) {
  const char* name = nullptr;
  const char* meaning = nullptr;
  if (driver.cuGetErrorName(result, &name) != CUDA_SUCCESS || !name) {
    snprintf(text, textSize, "CUDA error %d", result);
    return;
  }
  if (driver.cuGetErrorString(result, &meaning) != CUDA_SUCCESS || !meaning) meaning = "no description";
  snprintf(text, textSize, "%s (%s)", name, meaning);
}

}  // namespace emmy_cuda
