// tests/errors/NAME.emmy holds one invalid program per kind of user error, and NAME.expected the exact
// diagnostics it must produce (a golden file). They are produced as the driver produces them, from inside
// tests/errors, so that paths read `NAME.emmy`.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "driver/elaborate.h"
#include "driver/pipeline.h"
#include "golden_files.h"

namespace {

namespace fs = std::filesystem;
using emmy::testing::sortedFiles;

const fs::path kErrorsDir = fs::path(EMMY_SOURCE_DIR) / "tests" / "errors";

// The diagnostics of `emmy build NAME.emmy --emit tile` run in tests/errors: the frontend's and those of
// the schedules of the kernels that elaborate, which the lowering checks.
std::string diagnosticsOf(const fs::path& fileName) {
  emmy::testing::CurrentDirectory inErrorsDir(kErrorsDir);
  emmy::Diagnostics diagnostics;
  std::optional<std::vector<emmy::tensor::Kernel>> kernels =
      emmy::elaborateFile(fileName.string(), "", /*requireTypes=*/false, {}, diagnostics);
  if (!kernels) return diagnostics.render();
  emmy::PipelineOptions toTile;
  toTile.stopAfter = emmy::Level::Tile;
  try {
    emmy::lowerAll(*kernels, toTile);
  } catch (const emmy::CompilationFailed& failed) {
    return failed.diagnostics.render();
  }
  return "";
}

}  // namespace

TEST_CASE("every tests/errors case reports exactly its expected diagnostics", "[errors]") {
  const std::vector<fs::path> cases = sortedFiles(kErrorsDir, ".emmy");
  REQUIRE_FALSE(cases.empty());
  for (const fs::path& source : cases) {
    INFO(source.filename().string());
    const std::string actual = diagnosticsOf(source.filename());
    if (actual.empty()) {
      FAIL_CHECK("no error reported: the case tests nothing");
      continue;
    }
    emmy::testing::checkGoldenFile(fs::path(source).replace_extension(".expected"), actual);
  }
}

TEST_CASE("every tests/errors/*.expected belongs to a case", "[errors]") {
  const std::vector<fs::path> cases = sortedFiles(kErrorsDir, ".emmy");
  for (const fs::path& expected : sortedFiles(kErrorsDir, ".expected")) {
    INFO(expected.filename().string());
    CHECK(std::binary_search(cases.begin(), cases.end(), fs::path(expected).replace_extension(".emmy")));
  }
}
