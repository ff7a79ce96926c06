// The round trip of `emmy build --emit schedule` (section 5), for the tests of the examples and of
// generated programs.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace emmy::testing {

// `source` with the blocks `schedule KERNEL { ... }` and `schedule KERNEL<...> { ... }` (if any) taken out and
// `schedule` appended.
std::string withSchedule(const std::string& source, const std::string& kernel, const std::string& schedule);

// For every kernel instance of `source` (compiled as the file `name`): the schedule `--emit schedule`
// prints, pasted in place of the kernel's own, builds byte-identical CUDA and leaves the default policy
// nothing to add (Catch2 checks); only the instances of `kernel` when it is given. Imports resolve beside
// `name`. Returns the number of instances.
size_t checkScheduleRoundTrip(const std::string& source, const std::filesystem::path& name, const std::string& kernel = "");

}  // namespace emmy::testing
