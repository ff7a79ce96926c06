// Compiles generated CUDA to PTX or cubin in-process through NVRTC, and reports ptxas resource usage.
//
// NVRTC is loaded with dlopen on first use, so Emmy builds and starts without CUDA; only the commands that
// need it (`--emit ptx|cubin`, `--stats`) fail when it is missing.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace emmy {

// NVRTC, or the CUDA headers the generated code includes, is not installed where Emmy looks. A user error
// (the environment), not a bug: the message names every place looked and how to point Emmy at CUDA.
class CudaUnavailable : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

struct CudaCompileResult {
  bool ok = false;
  // NVRTC's log: the compile errors when !ok; with a cubin, also ptxas's resource report (see resourceUsage).
  std::string log;
  std::string ptx;
  std::vector<char> cubin;  // empty unless requested
};

// Throws UsageError unless `arch` names a CUDA architecture: `sm_` then the compute capability, optionally
// with an `a` or `f` suffix (sm_80, sm_90, sm_90a, sm_100f). Does not need NVRTC.
void validateCudaArch(const std::string& arch);

// Compiles `source` (named `fileName` in messages, e.g. "softmax.cu") for `arch` ("sm_90"). The PTX is
// always produced; with `wantCubin` the cubin too, for the real architecture, with ptxas's report in the log.
// The host-only parts of the file must sit inside `#ifndef __CUDACC_RTC__` (cuda_contract.md); NVRTC gets
// the toolkit's include folder for cuda_fp16.h / cuda_bf16.h, a <stdint.h>, and INFINITY / NAN.
// Throws UsageError for an arch this NVRTC does not support, CudaUnavailable when NVRTC is not found.
CudaCompileResult compileCuda(const std::string& source, const std::string& fileName, const std::string& arch,
                              bool wantCubin);

// Whether NVRTC can be loaded; when not, `whyNot` gets the same message CudaUnavailable would carry.
bool nvrtcAvailable(std::string* whyNot = nullptr);

// "NVRTC 13.0 (/usr/local/cuda/lib64/libnvrtc.so)". Throws CudaUnavailable.
std::string nvrtcDescription();

// The compute capabilities NVRTC compiles for (75, 80, 90, ...), ascending. Throws CudaUnavailable.
const std::vector<int>& nvrtcSupportedArchs();

struct KernelResources {
  std::string kernel;  // the name in the source (C++ names demangled, parameter list dropped)
  int registers = 0;
  int64_t spillStoreBytes = 0;
  int64_t spillLoadBytes = 0;
  int64_t sharedBytes = 0;  // static __shared__ memory
};

// Per kernel, in the order the kernels appear in the source. `result` must come from a successful
// compileCuda with wantCubin (that is when ptxas runs).
std::vector<KernelResources> resourceUsage(const CudaCompileResult& result);

// One line per kernel: `KERNEL: registers=R spill_stores=S spill_loads=L smem=B` (spills and smem in bytes).
std::string formatResourceUsage(const std::vector<KernelResources>& kernels);

}  // namespace emmy
