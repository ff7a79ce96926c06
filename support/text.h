// Small text helpers shared by the frontend and the driver.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace emmy {

// The candidate closest to `name` by edit distance, else one that `name` abbreviates or that abbreviates
// `name` (at least 3 characters), or "" when none is close enough to be likely meant.
std::string closestMatch(std::string_view name, const std::vector<std::string>& candidates);

// `name`, plus "; did you mean 'X'?" when a close candidate exists.
std::string withSuggestion(std::string message, std::string_view name, const std::vector<std::string>& candidates);

std::string join(const std::vector<std::string>& parts, std::string_view separator);

// FNV-1a of `text` in 16 hex digits: stable across runs, machines and compilers (std::hash is none of these).
std::string stableHash(std::string_view text);


}  // namespace emmy
