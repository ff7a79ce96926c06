// `emmy run` and `emmy bench` (spec section 6): the generated code on a CUDA GPU (runtime/). Without a
// device both throw runtime::NoCudaDevice, which the command turns into exit code 3.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "check/check.h"
#include "performance/performance.h"
#include "runtime/device.h"
#include "runtime/gpu_kernel.h"
#include "runtime/torch_gpu.h"

namespace emmy {

// `emmy run`: `emmy check` on the GPU. For the standard library's kernels each output is also compared
// with PyTorch's on the GPU (runtime/torch_gpu.h), when python3 has PyTorch and it sees the device.
int runOnGpu(const CheckOptions& options, const CudaGenerator& generateCuda, std::FILE* report = stdout);

// One file's kernels to time, as `emmy bench FILE [--kernel K] [--size ..] [-D ..] [--inputs DIR]` names them.
struct BenchCase {
  std::string file;
  std::string kernel;                      // empty: every instance
  std::vector<std::string> sizes;          // N=4096
  std::vector<std::string> defines;        // schedule params
  std::string inputsDir;                   // else random inputs, drawn as `emmy check` draws them
  uint64_t seed = 0;
  std::vector<std::string> scalars;        // eps=1e-5, as --scalar gives them (those without a default need one)
  // The conventional count of the work's flops (2·M·N·K for a matrix product), which every measurement's
  // throughput then uses; 0: the static model's (instanceWork).
  double flops = 0;
};

// Throughput of `work` done in `milliseconds` on `device`; a fraction is 0 when its peak is unknown.
struct Throughput {
  double bytesPerSecond = 0, flopsPerSecond = 0;
  double bandwidthFraction = 0, flopsFraction = 0;  // of the DRAM's and the FP32 units' peaks
  double copyFraction = 0;    // of the device's measured copy bandwidth, when it is given
  double tensorFraction = 0;  // of the tensor cores' peak, for an instance of f16 or bf16
};
Throughput throughput(const Work& work, double milliseconds, const runtime::CudaDevice& device,
                      double copyBytesPerSecond = 0, bool tensorCores = false);


// "1.89 TB/s, 38% of peak; 134.22 MFLOP, 0.95 TFLOP/s, 1% of FP32 peak", the measured part of a bench line,
// with the fractions of the copy bandwidth and the tensor cores' peak where they are known.
std::string formatThroughput(const Work& work, const Throughput& measured);

// One measurement of `runBench`, as it is made: Emmy's code or a PyTorch baseline on one instance.
struct BenchRecord {
  std::string kernel;  // "softmax"
  std::string dtype;   // the instance's T, "f16"; empty for a kernel without one
  std::map<std::string, int64_t> sizes;
  std::string implementation;  // "emmy", "torch eager", "torch.compile", "cublas" or "flash-attention"
  std::optional<std::string> failure;  // why there is no time
  bool skipped = false;                // the failure is why it was not measured, not an error
  double medianMilliseconds = 0, minMilliseconds = 0;
  int repetitions = 0;
  Work work;
  Throughput throughput;
  runtime::TorchClocks clocks;  // right after the timed calls, where known
  double compileSeconds = 0;    // torch.compile's compilation
  std::string sdpaBackend;      // PyTorch eager of an attention: the backend SDPA picked
  double emmySpeedup = 0;       // a baseline's median time over Emmy's (above 1: Emmy is faster); 0: unknown
};

struct BenchSettings {
  runtime::Timing timing{10, 100, false};
  bool compareWithTorch = true;  // also PyTorch (eager, and the baselines that apply) on the standard library's kernels
  int torchCompileSeconds = 0;   // also torch.compile, each compilation abandoned after this long; 0: not tried
  int torchCompileBudget = 0;    // all compilations together; past it the rest are skipped, saying so; 0: no limit
  double copyBytesPerSecond = 0;  // the device's measured copy bandwidth, the 100% of memory-bound work
  runtime::TorchSession* torch = nullptr;  // PyTorch's session; null: runBench starts one if it needs it
  std::function<void(const BenchRecord&)> record;  // called with each measurement as it is made
};

// Times every instance of every case on the GPU and prints, per instance as it is measured, the median
// time, GB/s and TFLOP/s from the bytes and flops of the static report (instanceWork) and the fractions
// of the device's peaks; then, for the standard library's instances, right away, the same for PyTorch
// eager and the baselines torch_stdlib.py times beside it (torch.compile, cuBLAS, FlashAttention), with
// Emmy's speed against each (one python3 session for all). Instances are prepared (random inputs, NVRTC
// and the host compiler) 8 ahead, in parallel, and run one at a time. Returns 0, or 1 when an instance
// failed to run or a file has errors (printed as diagnostics).
int runBench(const std::vector<BenchCase>& cases, const BenchSettings& settings, std::FILE* report = stdout);

}  // namespace emmy
