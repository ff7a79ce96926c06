// The CUDA device Emmy runs on (`emmy run`, `emmy bench`, `emmy tune`): found through the driver API,
// loaded at run time (emmy_cuda_driver.h), so that without a GPU Emmy still starts and says why there is
// no device.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace emmy::runtime {

// There is no usable CUDA device: no driver, no GPU, or the driver's refusal. The command exits with
// kExitNoCudaDevice (support/diagnostics.h) and the message, "no CUDA device found (REASON)".
class NoCudaDevice : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// What Emmy needs to know of device 0 (the first that CUDA_VISIBLE_DEVICES leaves).
struct CudaDevice {
  std::string name;  // "NVIDIA H200"
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  int64_t smClockKHz = 0;      // 0 when the driver does not say
  int64_t memoryClockKHz = 0;  // 0 when the driver does not say
  int busWidthBits = 0;
  int64_t l2Bytes = 0;
  int64_t memoryBytes = 0;
  int driverVersion = 0;  // 13000 for CUDA 13.0

  int capability() const { return major * 10 + minor; }  // 90
  std::string arch() const;                              // "sm_90"
  // The DRAM's peak: memory clock x bus width x 2 (double data rate), in bytes per second; 0 if unknown.
  double peakBandwidth() const;
  // FP32 peak without tensor cores: SMs x SM clock x FP32 lanes per SM x 2 (a fused multiply-add is two
  // flops), with 64 lanes per SM up to sm_80 and 128 from sm_86 on (Ampere GA10x, Ada, Hopper,
  // Blackwell); 0 if unknown. The boost clock the driver reports, so a bound, not a promise.
  double peakFp32Flops() const;
  // Dense f16/bf16 tensor-core peak: SMs x SM clock x the multiply-adds per SM per clock x 2, from each
  // generation's whitepaper (V100 125 TFLOP/s, A100 312, H100 SXM 989 at the clocks they quote); 0 if
  // unknown.
  double peakTensorFlops() const;
  // "NVIDIA H200 (sm_90, 132 SMs, 141 GiB, CUDA driver 13.0)"
  std::string describe() const;
};

// Device 0, or why there is none.
struct DeviceProbe {
  std::optional<CudaDevice> device;
  std::string reason;  // when there is no device: the driver's words
};
DeviceProbe probeCudaDevice();

// Whether this process has initialised the CUDA driver (a probe, a kernel run): a process forked after
// that cannot use the driver, which answers its child cuInit with an error.
bool cudaDriverInitializedHere();

// Device 0; throws NoCudaDevice("no CUDA device found (REASON)").
CudaDevice requireCudaDevice();

}  // namespace emmy::runtime
