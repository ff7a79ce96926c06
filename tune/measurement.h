// What `emmy tune` measures and how: the result of one candidate, the candidate as the backend gets it,
// and MeasurementBackend, the interface every way of measuring implements (the static model of
// cost_model.h, timing on a GPU, the fakes of the tests). IsolatedBackend (isolation.h) runs any of them in
// a child process.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/emit_cuda.h"
#include "compiler/pipeline.h"
#include "tune/param_space.h"

namespace emmy::tune {

#define EMMY_TUNE_STATUSES(X)                                                                           \
  X(Ok, "ok") X(Illegal, "illegal") X(CompileFailed, "compile-failed") X(Crashed, "crashed")           \
  X(TimedOut, "timed-out") X(WrongResult, "wrong-result")

enum class Status {
#define EMMY_ENUM_ENTRY(Kind, word) Kind,
  EMMY_TUNE_STATUSES(EMMY_ENUM_ENTRY)
#undef EMMY_ENUM_ENTRY
};
// "ok", "illegal", "compile-failed", "crashed", "timed-out", "wrong-result": the words the database stores.
const char* statusName(Status status);
std::optional<Status> parseStatus(const std::string& name);

struct Measurement {
  Status status = Status::Ok;
  double milliseconds = 0;  // the median time (or the model's estimate); meaningful only when Ok
  std::string message;      // why it failed (the first diagnostic, the signal, ...), or how it was measured
};

// One candidate, checked legal, lowered and printed as CUDA: what a backend measures.
struct CandidateProgram {
  std::string kernel;  // "matmul" or "matmul<f32>"
  Candidate params;
  Lowered lowered;           // the kernel instance through every level
  cuda::GeneratedCuda cuda;  // NAME.cu and NAME.h, with the host function of section 4 of the language
  std::map<std::string, int64_t> sizes;  // every size of the kernel
  std::map<std::string, std::string> scalars;  // --scalar values, by name, as text (check/check.h)
};

class MeasurementBackend {
public:
  virtual ~MeasurementBackend() = default;
  // The device and architecture the results are for, as the tuning database keys them ("NVIDIA H200",
  // "sm_90"). Results of different devices never mix.
  virtual std::string device() const = 0;
  virtual std::string arch() const = 0;
  // How the times are obtained, for the user ("median of 20 runs on NVIDIA H200", "estimated by the static
  // model, not timed").
  virtual std::string description() const = 0;
  // What the candidates of one kernel instance at one set of sizes share (inputs, the reference outputs),
  // computed once and kept for the next ones. measure calls it itself; a wrapper that measures in a child
  // process (IsolatedBackend) calls it in the parent first, so that what it computes outlives the child.
  virtual void prepare(const CandidateProgram& program) {}
  // Compiles and measures one candidate. A time counts only for an output that matches the reference
  // (WrongResult otherwise). A backend that touches the GPU or can crash or hang runs inside an
  // IsolatedBackend, so that a failure here costs one candidate, not the search.
  virtual Measurement measure(const CandidateProgram& program) = 0;
};

}  // namespace emmy::tune
