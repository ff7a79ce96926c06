#include "tune/measurement.h"

namespace emmy::tune {

const char* statusName(Status status) {
  switch (status) {
#define EMMY_CASE(Kind, word) \
  case Status::Kind:          \
    return word;
    EMMY_TUNE_STATUSES(EMMY_CASE)
#undef EMMY_CASE
  }
  return "?";
}

std::optional<Status> parseStatus(const std::string& name) {
#define EMMY_MATCH(Kind, word) \
  if (name == word) return Status::Kind;
  EMMY_TUNE_STATUSES(EMMY_MATCH)
#undef EMMY_MATCH
  return std::nullopt;
}

}  // namespace emmy::tune
