// The measurement backend of `emmy tune --cost-model`: candidates ranked by the static model of
// performance/performance.h (roofline terms, memory traffic per schedule, occupancy from ptxas through NVRTC)
// instead of timings, so that tuning runs without a GPU. Without NVRTC the occupancy assumes 32
// registers per thread, and description() says so.
#pragma once

#include "tune/measurement.h"

namespace emmy::tune {

// The device the static model's records are keyed by: it stands for no real GPU.
constexpr const char* kStaticModelDevice = "static model (H200-class)";

class CostModelBackend : public MeasurementBackend {
public:
  explicit CostModelBackend(std::string arch);

  std::string device() const override { return kStaticModelDevice; }
  std::string arch() const override { return arch_; }
  std::string description() const override;
  // Ok with the estimate; CompileFailed when NVRTC rejects the CUDA (then a bug in Emmy) or a block does
  // not fit on an SM. Nothing runs, so no output is checked.
  Measurement measure(const CandidateProgram& program) override;

private:
  std::string arch_;
  bool withNvrtc_;
  std::string whyNoNvrtc_;
};

}  // namespace emmy::tune
