// `emmy run` and `emmy bench` (spec section 6): the generated code on a CUDA GPU (runtime/). Without a
// device both throw runtime::NoCudaDevice, which the command turns into exit code 3.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "check/check.h"
#include "performance/performance.h"
#include "runtime/device.h"
#include "runtime/gpu_kernel.h"

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
};

struct BenchSettings {
  runtime::Timing timing{10, 100, false};
  bool compareWithTorch = true;  // also PyTorch eager, for the standard library's kernels
};

// Times every instance of every case on the GPU and prints, per instance as it is measured, the median
// time, GB/s and TFLOP/s from the bytes and flops of the static report (instanceWork) and the fraction of
// the device's peak; then the same for PyTorch eager on the standard library's instances (one python3
// process for all). Returns 0, or 1 when an instance failed to run or a file has errors (printed as
// diagnostics).
int runBench(const std::vector<BenchCase>& cases, const BenchSettings& settings, std::FILE* report = stdout);

// Throughput of `work` done in `milliseconds` on `device`; a fraction is 0 when the device's peak is unknown.
struct Throughput {
  double bytesPerSecond = 0, flopsPerSecond = 0;
  double bandwidthFraction = 0, flopsFraction = 0;
};
Throughput throughput(const Work& work, double milliseconds, const runtime::CudaDevice& device);

// "1.89 TB/s, 38% of peak; 134.22 MFLOP, 0.95 TFLOP/s, 1% of FP32 peak", the measured part of a bench line.
std::string formatThroughput(const Work& work, const Throughput& measured);

// Whether `file` is a module of the standard library this emmy uses.
bool isStdlibFile(const std::string& file);

}  // namespace emmy
