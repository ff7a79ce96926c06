// The measurement backend of `emmy tune` on a CUDA GPU: each candidate's generated CUDA compiled for the
// device (runtime::GpuKernel), run on seeded random inputs at the target's sizes, every output compared
// with the Tensor IR evaluator's as `emmy check` compares them, then timed with CUDA events: the median of
// several calls after warm-ups, with the L2 cache flushed before each. The inputs and the reference
// outputs are computed once per kernel instance and sizes (prepare), since every candidate shares them.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "check/check.h"
#include "runtime/device.h"
#include "runtime/gpu_kernel.h"
#include "tune/measurement.h"

namespace emmy::tune {

// A candidate's code, compiled: runs once on the inputs for the outputs, then times `timing.repetitions`
// calls.
using TimedKernel = std::function<runtime::GpuRun(const tensor::EvaluationInputs&, const runtime::Timing&)>;
// Compiles a candidate's generated CUDA; InternalError when it does not compile (a bug in Emmy, in one
// candidate). On the GPU, gpuCompiler; in the tests, the CPU simulation.
using TimedKernelCompiler = std::function<TimedKernel(const tensor::Kernel&, const cuda::GeneratedCuda&)>;

// runtime::GpuKernel on `device`.
TimedKernelCompiler gpuCompiler(const runtime::CudaDevice& device);

// 5 warm-ups, the median of 20 timed calls, the L2 cache flushed before each.
constexpr runtime::Timing kDefaultTuningTiming{5, 20, true};

class GpuTimingBackend : public MeasurementBackend {
public:
  GpuTimingBackend(const runtime::CudaDevice& device, TimedKernelCompiler compile, runtime::Timing timing = kDefaultTuningTiming);

  std::string device() const override { return deviceName_; }
  std::string arch() const override { return arch_; }
  std::string description() const override;
  // The inputs (seed 0, as `emmy check` draws them) and the reference outputs of the program's kernel at its
  // sizes, unless those are the ones kept from the previous call.
  void prepare(const CandidateProgram& program) override;
  // CompileFailed when the CUDA does not compile; Crashed (the fault by name, a crash, the host function's
  // error) or TimedOut when the run fails; WrongResult, with each differing output's worst element, when
  // an output is outside the tolerance; else Ok with the median time.
  Measurement measure(const CandidateProgram& program) override;

private:
  std::string deviceName_, arch_;
  TimedKernelCompiler compile_;
  runtime::Timing timing_;
  std::string referenceKey_;  // the kernel's Tensor IR, sizes and scalars that `reference_` is for
  std::optional<ReferenceRun> reference_;
};

}  // namespace emmy::tune
