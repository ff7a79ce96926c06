// Failure isolation: a MeasurementBackend whose every measurement runs in a forked child process with a
// time limit. A candidate that crashes the child (an illegal address, an abort) is Crashed, one that
// does not finish in time is TimedOut (its whole process group killed), and the search goes on. The parent
// never touches the GPU (a CUDA context does not survive fork), but it does what the candidates share
// (MeasurementBackend::prepare), so that it is done once and not in every child.
#pragma once

#include <chrono>
#include <memory>

#include "tune/measurement.h"

namespace emmy::tune {

class IsolatedBackend : public MeasurementBackend {
public:
  IsolatedBackend(std::unique_ptr<MeasurementBackend> inner, std::chrono::milliseconds timeout)
      : inner_(std::move(inner)), timeout_(timeout) {}

  std::string device() const override { return inner_->device(); }
  std::string arch() const override { return inner_->arch(); }
  std::string description() const override;
  void prepare(const CandidateProgram& program) override { inner_->prepare(program); }
  // The inner backend's prepare here, in this process, then its measure in a child.
  Measurement measure(const CandidateProgram& program) override;

private:
  std::unique_ptr<MeasurementBackend> inner_;
  std::chrono::milliseconds timeout_;
};

}  // namespace emmy::tune
