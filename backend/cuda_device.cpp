#include "backend/cuda_device.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace emmy {

namespace {

// --- The part of the CUDA driver API the probe uses, declared here so that building Emmy needs no CUDA. ---
using CUresult = int;
using CUdevice = int;
constexpr CUresult kCudaSuccess = 0;
constexpr int kComputeCapabilityMajor = 75, kComputeCapabilityMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*

struct DriverApi {
  CUresult (*init)(unsigned flags);
  CUresult (*deviceGetCount)(int* count);
  CUresult (*deviceGet)(CUdevice* device, int ordinal);
  CUresult (*deviceGetName)(char* name, int length, CUdevice device);
  CUresult (*deviceGetAttribute)(int* value, int attribute, CUdevice device);
  CUresult (*getErrorName)(CUresult error, const char** name);
  CUresult (*getErrorString)(CUresult error, const char** text);
};

std::string errorText(const DriverApi& api, const char* call, CUresult error) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.getErrorName(error, &name) != kCudaSuccess || !name) name = "unknown error";
  if (api.getErrorString(error, &text) != kCudaSuccess || !text) text = "";
  return fmt::format("{}: {} ({})", call, name, text);
}

}  // namespace

CudaDeviceProbe probeCudaDevices() {
  CudaDeviceProbe probe;
  // Never closed: the driver cannot be unloaded safely once initialised.
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* error = dlerror();
    probe.reason = error ? error : "libcuda.so.1 could not be loaded";
    return probe;
  }
  DriverApi api{};
  auto resolve = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(library, name));
    return function != nullptr;
  };
  for (bool found : {resolve(api.init, "cuInit"), resolve(api.deviceGetCount, "cuDeviceGetCount"),
                     resolve(api.deviceGet, "cuDeviceGet"), resolve(api.deviceGetName, "cuDeviceGetName"),
                     resolve(api.deviceGetAttribute, "cuDeviceGetAttribute"),
                     resolve(api.getErrorName, "cuGetErrorName"), resolve(api.getErrorString, "cuGetErrorString")})
    if (!found) {
      probe.reason = "libcuda.so.1 lacks the CUDA driver API (not a CUDA driver?)";
      return probe;
    }
  if (CUresult error = api.init(0); error != kCudaSuccess) {
    probe.reason = errorText(api, "cuInit", error);
    return probe;
  }
  int count = 0;
  if (CUresult error = api.deviceGetCount(&count); error != kCudaSuccess) {
    probe.reason = errorText(api, "cuDeviceGetCount", error);
    return probe;
  }
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice device = 0;
    char name[256] = {};
    int major = 0, minor = 0;
    if (api.deviceGet(&device, ordinal) != kCudaSuccess || api.deviceGetName(name, sizeof name, device) != kCudaSuccess ||
        api.deviceGetAttribute(&major, kComputeCapabilityMajor, device) != kCudaSuccess ||
        api.deviceGetAttribute(&minor, kComputeCapabilityMinor, device) != kCudaSuccess)
      continue;
    probe.devices.push_back({name, fmt::format("sm_{}{}", major, minor)});
  }
  if (probe.devices.empty()) probe.reason = "the CUDA driver reports no device";
  return probe;
}

}  // namespace emmy
