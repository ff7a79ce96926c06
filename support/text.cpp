#include "support/text.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

namespace emmy {

namespace {
// Insertions, deletions, substitutions and swaps of two neighbours (`spilt` for `split`) each count one
// (the optimal string alignment distance).
size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
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
  if (bestDistance <= limit) return best;
  // An abbreviation is no typo but just as likely meant: `epsilon` for `eps`, `dim` for `dimension`.
  for (const std::string& candidate : candidates) {
    std::string_view shorter = candidate.size() < name.size() ? std::string_view(candidate) : name;
    std::string_view longer = candidate.size() < name.size() ? name : std::string_view(candidate);
    if (shorter.size() >= 3 && longer.starts_with(shorter) && (best.empty() || candidate < best)) best = candidate;
  }
  return best;
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
std::string stableHash(std::string_view text) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return fmt::format("{:016x}", hash);
}

}  // namespace emmy
