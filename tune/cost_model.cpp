#include "tune/cost_model.h"

#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "backend/nvrtc.h"
#include "performance/performance.h"

namespace emmy::tune {

CostModelBackend::CostModelBackend(std::string arch) : arch_(std::move(arch)) {
  validateCudaArch(arch_);
  withNvrtc_ = nvrtcAvailable(&whyNoNvrtc_);
}

std::string CostModelBackend::description() const {
  std::string occupancy = withNvrtc_ ? "occupancy, spills and the instruction mix from ptxas and the PTX"
                                     : "occupancy assuming 32 registers per thread, since NVRTC is missing (" +
                                           whyNoNvrtc_.substr(0, whyNoNvrtc_.find('\n')) + ")";
  return fmt::format("ranked by the static model for {} (roofline, memory traffic, {}): estimates, not timings", arch_,
                     occupancy);
}

Measurement CostModelBackend::measure(const CandidateProgram& program) {
  std::optional<CudaCompileResult> compiled;
  if (withNvrtc_) {
    compiled = compileCuda(program.cuda.source, program.cuda.baseName + ".cu", arch_, /*wantCubin=*/true);
    if (!compiled->ok)
      return {Status::CompileFailed, 0,
              "NVRTC rejects the generated CUDA (a bug in Emmy): " + compiled->log.substr(0, compiled->log.find('\n'))};
  }
  TimeEstimate estimate = estimateTime(program.lowered, compiled ? &*compiled : nullptr, arch_, program.sizes);
  if (!std::isfinite(estimate.seconds)) return {Status::CompileFailed, 0, estimate.summary};
  return {Status::Ok, estimate.seconds * 1e3, estimate.summary};
}

}  // namespace emmy::tune
