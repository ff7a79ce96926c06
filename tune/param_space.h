// The search space of `emmy tune`: the `param`s a kernel's schedule declares, each with its candidates in
// the order written. A point of the space is a Candidate, a value per param, applied exactly as `-D`.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frontend/schedule.h"

namespace emmy::tune {

// A value for every param of the space, by name: what `-D NAME=VALUE` would give.
using Candidate = std::map<std::string, int64_t>;

struct TuningParam {
  std::string name;
  std::vector<int64_t> candidates;  // as written
  int64_t defaultValue = 0;
};

class ParamSpace {
public:
  // Params sorted by name, so that a space does not depend on the order of the declarations.
  explicit ParamSpace(const std::map<std::string, DeclaredParam>& declared);

  const std::vector<TuningParam>& params() const { return params_; }
  bool empty() const { return params_.empty(); }
  // The number of points, saturated at UINT64_MAX.
  uint64_t size() const;
  // Every param at its declared default.
  Candidate defaults() const;
  // The point of index `index` < size() in lexicographic order (the first param varies slowest, each param
  // through its candidates in the order written).
  Candidate at(uint64_t index) const;
  // A point with each param at the candidate of its position in `positions`.
  Candidate point(const std::vector<size_t>& positions) const;
  // Points that differ from `candidate` in one param, moved to the candidate next to its value in the
  // written order (the one before, then the one after), params in name order.
  std::vector<Candidate> neighbours(const Candidate& candidate) const;

private:
  std::vector<TuningParam> params_;
};

// "BK=16 BM=64 BN=64": params in name order. The form the tuning database stores and the messages print.
std::string candidateText(const Candidate& candidate);
// The inverse of candidateText; nullopt for text it did not write.
std::optional<Candidate> parseCandidateText(const std::string& text);

}  // namespace emmy::tune
