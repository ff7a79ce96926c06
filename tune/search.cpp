#include "tune/search.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <set>

#include "support/diagnostics.h"

namespace emmy::tune {

const char* phaseName(Phase phase) {
  switch (phase) {
    case Phase::Defaults: return "defaults";
    case Phase::Exhaustive: return "exhaustive";
    case Phase::Sampling: return "sampling";
    case Phase::Refinement: return "refinement";
  }
  return "?";
}

const Trial* bestTrial(const std::vector<Trial>& trials) {
  const Trial* best = nullptr;
  for (const Trial& trial : trials)
    if (trial.measurement.status == Status::Ok && (!best || trial.measurement.milliseconds < best->measurement.milliseconds))
      best = &trial;
  return best;
}

namespace {

class Searcher {
public:
  Searcher(const ParamSpace& space, const Budget& budget, uint64_t seed,
           const std::function<Measurement(const Candidate&, Phase)>& evaluate)
      : space_(space), budget_(budget), random_(seed), evaluate_(evaluate), start_(std::chrono::steady_clock::now()) {
    if (!budget_.candidates && !budget_.seconds) budget_.candidates = kDefaultCandidateBudget;
  }

  SearchOutcome run() {
    uint64_t points = space_.size();
    int64_t countLimit = budget_.candidates.value_or(kDefaultCandidateBudget);
    outcome_.exhaustive = points <= static_cast<uint64_t>(std::max<int64_t>(countLimit, 1));
    visit(space_.defaults(), Phase::Defaults);
    if (outcome_.exhaustive) {
      for (uint64_t index = 0; index < points && !spent(); ++index)
        if (!visited_.count(space_.at(index))) visit(space_.at(index), Phase::Exhaustive);
      return std::move(outcome_);
    }
    while (!spent() && !sampled()) visit(randomUnvisited(), Phase::Sampling);
    while (!spent()) {
      std::optional<Candidate> next = unvisitedNeighbourOfTheBest();
      visit(next ? *next : randomUnvisited(), next ? Phase::Refinement : Phase::Sampling);
    }
    return std::move(outcome_);
  }

private:
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

  bool spent() const {
    if (visited_.size() >= space_.size()) return true;
    if (budget_.candidates && static_cast<int64_t>(outcome_.trials.size()) >= *budget_.candidates) return true;
    return budget_.seconds && elapsed() >= *budget_.seconds;
  }

  // The sampling phase takes the first half of the budget.
  bool sampled() const {
    if (budget_.candidates && static_cast<int64_t>(outcome_.trials.size()) >= (*budget_.candidates + 1) / 2) return true;
    return budget_.seconds && elapsed() >= *budget_.seconds / 2;
  }

  void visit(const Candidate& candidate, Phase phase) {
    visited_.insert(candidate);
    outcome_.trials.push_back({candidate, evaluate_(candidate, phase), phase});
  }

  Candidate randomUnvisited() {
    // Misses are rare until most of the space is visited; then the space is small enough to scan.
    for (int attempt = 0; attempt < 64; ++attempt) {
      std::vector<size_t> positions;
      for (const TuningParam& param : space_.params())
        positions.push_back(std::uniform_int_distribution<size_t>(0, param.candidates.size() - 1)(random_));
      Candidate candidate = space_.point(positions);
      if (!visited_.count(candidate)) return candidate;
    }
    for (uint64_t index = 0;; ++index)
      if (!visited_.count(space_.at(index))) return space_.at(index);
  }

  std::optional<Candidate> unvisitedNeighbourOfTheBest() const {
    std::vector<const Trial*> good;
    for (const Trial& trial : outcome_.trials)
      if (trial.measurement.status == Status::Ok) good.push_back(&trial);
    std::stable_sort(good.begin(), good.end(), [](const Trial* a, const Trial* b) {
      return a->measurement.milliseconds < b->measurement.milliseconds;
    });
    for (const Trial* trial : good)
      for (const Candidate& neighbour : space_.neighbours(trial->candidate))
        if (!visited_.count(neighbour)) return neighbour;
    return std::nullopt;
  }

  const ParamSpace& space_;
  Budget budget_;
  std::mt19937_64 random_;
  const std::function<Measurement(const Candidate&, Phase)>& evaluate_;
  std::chrono::steady_clock::time_point start_;
  std::set<Candidate> visited_;
  SearchOutcome outcome_;
};

}  // namespace

SearchOutcome search(const ParamSpace& space, const Budget& budget, uint64_t seed,
                     const std::function<Measurement(const Candidate&, Phase)>& evaluate) {
  EMMY_INTERNAL_ASSERT(!space.empty(), "searching an empty space");
  return Searcher(space, budget, seed, evaluate).run();
}

}  // namespace emmy::tune
