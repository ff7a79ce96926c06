// Whether this machine has a CUDA device, asked of the CUDA driver (libcuda.so.1, loaded with dlopen so
// that Emmy builds and starts without it). Deliberately tiny: `emmy tune` needs only this answer before it
// decides how to measure; the CUDA runtime of `emmy run` and `emmy bench` does the rest.
//
// cuInit initialises CUDA in the calling process, after which a fork()ed child cannot use the GPU: a process
// that forks measuring children asks in a child of its own (tune/device.h).
#pragma once

#include <string>
#include <vector>

namespace emmy {

struct CudaDevice {
  std::string name;  // "NVIDIA H200"
  std::string arch;  // "sm_90"
};

struct CudaDeviceProbe {
  std::vector<CudaDevice> devices;  // empty: none found, and `reason` says why
  std::string reason;               // "libcuda.so.1: cannot open shared object file: ...", "cuInit: CUDA_ERROR_NO_DEVICE ..."
};

CudaDeviceProbe probeCudaDevices();

}  // namespace emmy
