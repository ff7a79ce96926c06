#include "tune/param_space.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "support/diagnostics.h"

namespace emmy::tune {

ParamSpace::ParamSpace(const std::map<std::string, DeclaredParam>& declared) {
  for (const auto& [name, param] : declared) {
    EMMY_INTERNAL_ASSERT(!param.candidates.empty(), "param {} has no candidates (its errors were not reported)", name);
    params_.push_back({name, param.candidates, param.defaultValue});
  }
}

uint64_t ParamSpace::size() const {
  uint64_t points = 1;
  for (const TuningParam& param : params_) {
    uint64_t count = param.candidates.size();
    if (points > std::numeric_limits<uint64_t>::max() / count) return std::numeric_limits<uint64_t>::max();
    points *= count;
  }
  return points;
}

Candidate ParamSpace::defaults() const {
  Candidate candidate;
  for (const TuningParam& param : params_) candidate[param.name] = param.defaultValue;
  return candidate;
}

Candidate ParamSpace::at(uint64_t index) const {
  EMMY_INTERNAL_ASSERT(index < size(), "point {} of a space of {}", index, size());
  std::vector<size_t> positions(params_.size());
  for (size_t k = params_.size(); k-- > 0;) {
    positions[k] = index % params_[k].candidates.size();
    index /= params_[k].candidates.size();
  }
  return point(positions);
}

Candidate ParamSpace::point(const std::vector<size_t>& positions) const {
  Candidate candidate;
  for (size_t k = 0; k < params_.size(); ++k) candidate[params_[k].name] = params_[k].candidates.at(positions[k]);
  return candidate;
}

std::vector<Candidate> ParamSpace::neighbours(const Candidate& candidate) const {
  std::vector<Candidate> result;
  for (const TuningParam& param : params_) {
    const std::vector<int64_t>& values = param.candidates;
    auto position = std::find(values.begin(), values.end(), candidate.at(param.name));
    EMMY_INTERNAL_ASSERT(position != values.end(), "{} is not a candidate of {}", candidate.at(param.name), param.name);
    for (auto next : {position - (position == values.begin() ? 0 : 1), position + 1}) {
      if (next == position || next == values.end()) continue;
      Candidate moved = candidate;
      moved[param.name] = *next;
      result.push_back(moved);
    }
  }
  return result;
}

std::string candidateText(const Candidate& candidate) {
  std::string text;
  for (const auto& [name, value] : candidate) text += fmt::format("{}{}={}", text.empty() ? "" : " ", name, value);
  return text;
}

std::optional<Candidate> parseCandidateText(const std::string& text) {
  Candidate candidate;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    size_t equals = word.find('=');
    if (equals == std::string::npos || equals == 0) return std::nullopt;
    try {
      size_t parsed = 0;
      int64_t value = std::stoll(word.substr(equals + 1), &parsed);
      if (parsed != word.size() - equals - 1) return std::nullopt;
      candidate[word.substr(0, equals)] = value;
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return candidate;
}

}  // namespace emmy::tune
