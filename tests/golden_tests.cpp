// Golden files of the IR levels: tests/golden/LEVEL/FOLDER/NAME.LEVEL holds the text `emmy build --emit
// LEVEL` prints for FOLDER/NAME.emmy (examples and stdlib). EMMY_UPDATE_GOLDEN=1 rewrites them; review the
// change as a diff.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "frontend/frontend.h"
#include "ir/tensor/printer.h"

namespace {

namespace fs = std::filesystem;

const fs::path kSourceDir = EMMY_SOURCE_DIR;

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// What `emmy build FILE --emit tensor` prints, run from the source folder.
std::string tensorIrOf(const fs::path& relativePath) {
  fs::path previous = fs::current_path();
  fs::current_path(kSourceDir);
  emmy::Diagnostics diagnostics;
  emmy::Frontend frontend(diagnostics, {emmy::Frontend::defaultStdlibDir()});
  std::string text;
  if (const emmy::ast::Module* module = frontend.loadFile(relativePath))
    for (const emmy::tensor::Kernel& kernel : frontend.elaborateAll(*module))
      text += (text.empty() ? "" : "\n") + emmy::tensor::printKernel(kernel);
  fs::current_path(previous);
  INFO(diagnostics.render());
  REQUIRE_FALSE(diagnostics.hasErrors());
  return text;
}

std::vector<fs::path> goldenSources() {
  std::vector<fs::path> sources;
  for (const char* folder : {"examples", "stdlib"})
    for (const fs::directory_entry& entry : fs::directory_iterator(kSourceDir / folder))
      if (entry.path().extension() == ".emmy") sources.push_back(fs::path(folder) / entry.path().filename());
  std::sort(sources.begin(), sources.end());
  return sources;
}

}  // namespace

TEST_CASE("Tensor IR of every example and stdlib module matches its golden file", "[golden]") {
  const char* update = std::getenv("EMMY_UPDATE_GOLDEN");
  for (const fs::path& source : goldenSources()) {
    INFO(source.string() << " (EMMY_UPDATE_GOLDEN=1 rewrites tests/golden)");
    std::string actual = tensorIrOf(source);
    CHECK(actual == tensorIrOf(source));  // byte-identical between runs
    fs::path golden = kSourceDir / "tests" / "golden" / "tensor" / source.parent_path() / (source.stem().string() + ".tensor");
    if (update && std::string(update) == "1") {
      fs::create_directories(golden.parent_path());
      std::ofstream(golden, std::ios::binary) << actual;
      continue;
    }
    REQUIRE(fs::exists(golden));
    CHECK(actual == readFile(golden));
  }
}
