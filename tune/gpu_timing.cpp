#include "tune/gpu_timing.h"

#include <memory>

#include <fmt/format.h>

#include "ir/tensor/printer.h"
#include "support/diagnostics.h"
#include "support/text.h"

namespace emmy::tune {

TimedKernelCompiler gpuCompiler(const runtime::CudaDevice& device) {
  return [device](const tensor::Kernel& kernel, const cuda::GeneratedCuda& source) -> TimedKernel {
    auto program = std::make_shared<runtime::GpuKernel>(device, kernel, source);
    return [program](const tensor::EvaluationInputs& inputs, const runtime::Timing& timing) {
      return program->run(inputs, timing);
    };
  };
}

GpuTimingBackend::GpuTimingBackend(const runtime::CudaDevice& device, TimedKernelCompiler compile, runtime::Timing timing)
    : deviceName_(device.name), arch_(device.arch()), compile_(std::move(compile)), timing_(timing) {
  EMMY_INTERNAL_ASSERT(timing_.repetitions > 0, "GpuTimingBackend times no call");
}

std::string GpuTimingBackend::description() const {
  return fmt::format("timed on {} with CUDA events, median of {} after {} warm-ups{}", deviceName_, timing_.repetitions,
                     timing_.warmup, timing_.flushL2 ? ", L2 flushed" : "");
}

void GpuTimingBackend::prepare(const CandidateProgram& program) {
  const tensor::Kernel& kernel = program.lowered.tensor;
  // Every candidate of a kernel instance has the same Tensor IR: params change the schedule only.
  std::string key = tensor::printKernel(kernel);
  for (const auto& [name, value] : program.sizes) key += fmt::format("\n{}={}", name, value);
  for (const auto& [name, value] : program.scalars) key += fmt::format("\n{}={}", name, value);
  if (reference_ && key == referenceKey_) return;
  reference_ = referenceRun(kernel, /*inputsDir=*/"", /*seed=*/0, program.sizes, program.scalars);
  referenceKey_ = std::move(key);
}

Measurement GpuTimingBackend::measure(const CandidateProgram& program) {
  prepare(program);
  const tensor::Kernel& kernel = program.lowered.tensor;
  TimedKernel timed;
  try {
    timed = compile_(kernel, program.cuda);
  } catch (const InternalError& e) {
    return {Status::CompileFailed, 0, e.what()};
  }
  runtime::GpuRun ran = timed(reference_->inputs, timing_);
  if (ran.failure) return {ran.timedOut ? Status::TimedOut : Status::Crashed, 0, *ran.failure};
  std::vector<std::string> mismatches;
  for (const OutputComparison& comparison : compareOutputs(kernel, ran.outputs, reference_->outputs))
    if (!comparison.ok()) mismatches.push_back(formatComparison(comparison));
  if (!mismatches.empty()) return {Status::WrongResult, 0, join(mismatches, "; ")};
  return {Status::Ok, ran.medianMilliseconds(), ""};
}

}  // namespace emmy::tune
