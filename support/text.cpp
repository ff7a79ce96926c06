#include "support/text.h"

#include <algorithm>
#include <set>

namespace emmy {

namespace {
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string closestMatch(std::string_view name, const std::vector<std::string>& candidates) {
  // A typo changes at most a third of a name (and at least one character).
  size_t limit = std::max<size_t>(1, name.size() / 3);
  std::string best;
  size_t bestDistance = limit + 1;
  for (const std::string& candidate : candidates) {
    size_t d = editDistance(name, candidate);
    if (d < bestDistance || (d == bestDistance && !best.empty() && candidate < best)) {
      best = candidate;
      bestDistance = d;
    }
  }
  return bestDistance <= limit ? best : "";
}

std::string withSuggestion(std::string message, std::string_view name, const std::vector<std::string>& candidates) {
  std::string best = closestMatch(name, candidates);
  if (!best.empty()) message += "; did you mean '" + best + "'?";
  return message;
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}
}  // namespace emmy
