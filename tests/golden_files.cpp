#include "golden_files.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

namespace emmy::testing {

namespace fs = std::filesystem;

bool updatingGoldenFiles() {
  const char* value = std::getenv("EMMY_UPDATE_GOLDEN");
  return value != nullptr && std::string(value) == "1";
}

void checkGoldenFile(const fs::path& path, const std::string& actual) {
  INFO("golden file " << path.string() << " (EMMY_UPDATE_GOLDEN=1 rewrites it)");
  if (updatingGoldenFiles()) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  if (!fs::exists(path)) {
    FAIL_CHECK("the golden file is missing");
    return;
  }
  CHECK(actual == readFile(path));
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<fs::path> sortedFiles(const fs::path& directory, const std::string& extension) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory))
    if (entry.path().extension() == extension) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

CurrentDirectory::CurrentDirectory(const fs::path& directory) : previous_(fs::current_path()) {
  fs::current_path(directory);
}

CurrentDirectory::~CurrentDirectory() { fs::current_path(previous_); }

}  // namespace emmy::testing
