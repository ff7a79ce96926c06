// Golden files: expected outputs kept in the tree and compared with what the code produces now. Running a
// test binary with EMMY_UPDATE_GOLDEN=1 rewrites them from the current output instead; the change is then
// reviewed as a diff.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace emmy::testing {

bool updatingGoldenFiles();

// Compares `actual` with the golden file `path` (a Catch2 check that fails when the file is missing or
// differs), or rewrites the file, creating its folder, when updating.
void checkGoldenFile(const std::filesystem::path& path, const std::string& actual);

std::string readFile(const std::filesystem::path& path);

// The files in `directory` whose names end in `extension`, sorted by name.
std::vector<std::filesystem::path> sortedFiles(const std::filesystem::path& directory, const std::string& extension);

// Makes `directory` the current directory until the end of the scope, as when `emmy` runs there.
class CurrentDirectory {
public:
  explicit CurrentDirectory(const std::filesystem::path& directory);
  ~CurrentDirectory();
  CurrentDirectory(const CurrentDirectory&) = delete;
  CurrentDirectory& operator=(const CurrentDirectory&) = delete;

private:
  std::filesystem::path previous_;
};

}  // namespace emmy::testing
