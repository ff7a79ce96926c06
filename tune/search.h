// The search of `emmy tune` over a ParamSpace: the defaults first (the baseline of every speed-up); then
// every point, in lexicographic order, when the space fits the budget; otherwise seeded random points
// for the first half of the budget and, for the rest, local refinement: an unvisited neighbour
// (ParamSpace::neighbours) of the best point so far, or of the next best when the best's neighbours are
// all visited, or a random point when no good point has unvisited neighbours. The same space, budget,
// seed and results give the same sequence of candidates, which is what lets an interrupted run resume.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tune/measurement.h"
#include "tune/param_space.h"

namespace emmy::tune {

// Candidates visited when neither a count nor a time is given.
constexpr int64_t kDefaultCandidateBudget = 64;

// When to stop: after `candidates` candidates (failed ones included) or `seconds` of search, whichever
// comes first. Neither: kDefaultCandidateBudget candidates. With `seconds` alone the search is
// exhaustive for spaces of at most kDefaultCandidateBudget points.
struct Budget {
  std::optional<int64_t> candidates;
  std::optional<double> seconds;
};

enum class Phase { Defaults, Exhaustive, Sampling, Refinement };
const char* phaseName(Phase phase);

struct Trial {
  Candidate candidate;
  Measurement measurement;
  Phase phase = Phase::Defaults;
};

struct SearchOutcome {
  std::vector<Trial> trials;  // in the order visited; trials[0] is the defaults
  bool exhaustive = false;    // every point of the space was planned
};

// The best Ok trial (the least time; the earlier on a tie), or null.
const Trial* bestTrial(const std::vector<Trial>& trials);

// Visits candidates of `space` until the budget or the space is spent; `evaluate` measures one (or finds
// it recorded) and is called once per candidate.
SearchOutcome search(const ParamSpace& space, const Budget& budget, uint64_t seed,
                     const std::function<Measurement(const Candidate&, Phase)>& evaluate);

}  // namespace emmy::tune
