// `emmy tune` from a file to records: the kernel instances to tune and their spaces, the search with each
// candidate checked (elaboration and the `schedule` pass, as `-D` would give it), lowered, measured by a
// MeasurementBackend and recorded in the TuningDatabase (a candidate already recorded under the same key
// is not measured again: that is how a rerun resumes), and the final table. Also the lookup `emmy build`
// makes for the best recorded parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ir/tensor/nodes.h"
#include "tune/database.h"
#include "tune/measurement.h"
#include "tune/param_space.h"
#include "tune/search.h"

namespace emmy::tune {

// One kernel instance of a file, ready to tune.
struct TuningTarget {
  std::string file;
  std::string kernel;  // "matmul", or "matmul<f32>" for an instance of a generic kernel (also its --kernel selector)
  ParamSpace space;
  std::map<std::string, int64_t> sizes;  // the instance's sizes
  TuningKey key;
  std::map<std::string, std::string> scalars;  // --scalar values, by name, as text (check/check.h)
};

// The key of `kernel` (elaborated with any param values: neither hash depends on them) for `sizes` (only
// the kernel's own are kept) on `device` and `arch`. The kernel hash is the hash of its Tensor IR: the
// meaning, with every `fn` and imported definition inlined, and nothing of comments, layout or the file's
// name. The schedule hash covers the schedule's directives as written (params by name) and the params'
// candidates and defaults.
TuningKey tuningKey(const tensor::Kernel& kernel, const std::map<std::string, DeclaredParam>& params,
                    const std::map<std::string, int64_t>& sizes, const std::string& device, const std::string& arch);

// The instances of `file` that `selector` picks (all when empty) that have params: their schedules'
// or the default policy's for what those leave open. Those without are listed in `untunable`.
// `scalars` (--scalar) go with each target. Throws UsageError for sizes missing or unknown, a scalar
// unknown, and when nothing can be tuned; CompilationFailed for errors in the source.
std::vector<TuningTarget> tuningTargets(const std::string& file, const std::string& selector,
                                        const std::map<std::string, int64_t>& sizes, const std::string& device,
                                        const std::string& arch, std::vector<std::string>& untunable,
                                        const std::map<std::string, std::string>& scalars = {});

struct TuningRun {
  SearchOutcome outcome;
  std::vector<bool> replayed;  // per trial: found in the database, not measured in this run
};

// What the progress display is told after each candidate.
struct Progress {
  const TuningTarget& target;
  const Trial& trial;
  size_t visited;       // trials so far, this one included
  uint64_t planned;     // the most trials the search can make (budget or space), 0 when only time bounds it
  bool replayed;        // found in the database
  const Trial* best;    // the best so far, or null
};

TuningRun tune(const TuningTarget& target, const Budget& budget, uint64_t seed, MeasurementBackend& backend,
               TuningDatabase& database, const std::function<void(const Progress&)>& progress);

// The final table: a row per candidate (the Ok ones fastest first, then the failed ones), a column per
// param, its status, time and speed-up over the defaults; then a summary and the best candidate.
std::string formatTable(const TuningTarget& target, const TuningRun& run, const std::string& description,
                        const std::string& databasePath);

// `emmy tune --report`: the records of `kernelHashes` (all when empty), grouped by kernel and key.
std::string formatReport(const std::vector<TuningRecord>& records, const std::vector<std::string>& kernelHashes);

// The best recorded Ok result for `kernel` on `arch`, for `emmy build`. Records of other sizes or devices
// are candidates too, since a build knows neither: those of `sizes` when it names the kernel's sizes (all
// of them); timed ones before the static model's. Exactly one (sizes, device) group must remain; otherwise
// nullopt, with `note` saying which groups exist (empty when there are no records at all).
std::optional<TuningRecord> bestRecorded(const TuningDatabase& database, const tensor::Kernel& kernel,
                                         const std::map<std::string, DeclaredParam>& params, const std::string& arch,
                                         const std::map<std::string, int64_t>& sizes, std::string& note);

}  // namespace emmy::tune
