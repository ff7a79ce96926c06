#include "runtime/device.h"

#include <map>

#include <fmt/format.h>

#include "runtime/emmy_cuda_driver.h"

namespace emmy::runtime {

namespace {

using namespace emmy_cuda;

std::string resultText(const Driver& driver, CUresult result) {
  char text[256];
  describeResult(driver, result, text, sizeof text);
  return text;
}

}  // namespace

std::string CudaDevice::arch() const { return fmt::format("sm_{}", capability()); }

double CudaDevice::peakBandwidth() const {
  return static_cast<double>(memoryClockKHz) * 1e3 * (busWidthBits / 8.0) * 2;
}

double CudaDevice::peakFp32Flops() const {
  int lanes = capability() <= 80 ? 64 : 128;
  return static_cast<double>(multiprocessors) * static_cast<double>(smClockKHz) * 1e3 * lanes * 2;
}

double CudaDevice::peakTensorFlops() const {
  static const std::map<int, int> kFlopsPerClock = {{70, 1024}, {72, 1024}, {75, 1024}, {80, 2048}, {86, 1024},
                                                    {87, 1024}, {89, 1024}, {90, 4096}, {100, 8192}};
  auto found = kFlopsPerClock.find(capability());
  if (found == kFlopsPerClock.end()) return 0;
  return static_cast<double>(multiprocessors) * static_cast<double>(smClockKHz) * 1e3 * found->second;
}

std::string CudaDevice::describe() const {
  return fmt::format("{} ({}, {} SMs, {:.0f} GiB, CUDA driver {}.{})", name, arch(), multiprocessors,
                     static_cast<double>(memoryBytes) / (1 << 30), driverVersion / 1000, driverVersion % 1000 / 10);
}

DeviceProbe probeCudaDevice() {
  // Loaded once: the driver stays loaded for the life of the process.
  static Driver driver;
  static char loadError[512];
  static const bool loaded = loadDriver(driver, loadError, sizeof loadError);
  if (!loaded) return {std::nullopt, loadError};

  if (CUresult result = driver.cuInit(0); result != CUDA_SUCCESS)
    return {std::nullopt, "cuInit: " + resultText(driver, result)};
  int count = 0;
  if (CUresult result = driver.cuDeviceGetCount(&count); result != CUDA_SUCCESS)
    return {std::nullopt, "cuDeviceGetCount: " + resultText(driver, result)};
  if (count == 0) return {std::nullopt, "the CUDA driver sees no device"};
  CUdevice handle = 0;
  if (CUresult result = driver.cuDeviceGet(&handle, 0); result != CUDA_SUCCESS)
    return {std::nullopt, "cuDeviceGet: " + resultText(driver, result)};

  CudaDevice device;
  char name[256] = {};
  if (driver.cuDeviceGetName(name, sizeof name - 1, handle) == CUDA_SUCCESS) device.name = name;
  // An attribute the driver does not know (a newer CUDA may drop the clocks) reads as 0: unknown.
  auto attribute = [&](int which) -> int {
    int value = 0;
    return driver.cuDeviceGetAttribute(&value, which, handle) == CUDA_SUCCESS ? value : 0;
  };
  device.major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  device.minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  device.multiprocessors = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  device.smClockKHz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  device.memoryClockKHz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  device.busWidthBits = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  device.l2Bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  size_t memory = 0;
  if (driver.cuDeviceTotalMem_v2(&memory, handle) == CUDA_SUCCESS) device.memoryBytes = static_cast<int64_t>(memory);
  driver.cuDriverGetVersion(&device.driverVersion);
  return {device, ""};
}

bool cudaDriverInitializedHere() {
  // Only a library already loaded: asking must not load or start the driver.
  void* library = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!library) return false;
  using DeviceCount = CUresult (*)(int*);
  auto deviceCount = reinterpret_cast<DeviceCount>(dlsym(library, "cuDeviceGetCount"));
  int count = 0;
  // Before cuInit the driver answers CUDA_ERROR_NOT_INITIALIZED and stays uninitialised.
  bool initialized = deviceCount && deviceCount(&count) == CUDA_SUCCESS;
  dlclose(library);
  return initialized;
}

CudaDevice requireCudaDevice() {
  DeviceProbe probe = probeCudaDevice();
  if (!probe.device) throw NoCudaDevice(fmt::format("no CUDA device found ({})", probe.reason));
  return *probe.device;
}

}  // namespace emmy::runtime
