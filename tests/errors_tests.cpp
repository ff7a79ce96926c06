// tests/errors/NAME.emmy holds one invalid program per kind of user error, and NAME.expected the exact
// diagnostics it must produce (a golden file). They are produced as the driver produces them, from inside
// tests/errors, so that paths read `NAME.emmy`.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <filesystem>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "support/process.h"
#include "compiler/elaborate.h"
#include "compiler/pipeline.h"
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

namespace {

// The diagnostics of `source`, and how long the frontend took to give them.
std::pair<std::string, double> elaborationDiagnostics(const std::string& source) {
  auto start = std::chrono::steady_clock::now();
  emmy::TemporaryFolder folder;
  fs::path file = folder.path() / "test.emmy";
  std::ofstream(file) << source;
  emmy::Diagnostics diagnostics;
  emmy::elaborateFile(file.string(), "", /*requireTypes=*/false, {}, diagnostics);
  return {diagnostics.render(), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// fn f0 .. f{levels - 1}, each calling the one before it `uses` times, and a kernel calling the last
// one in index form or in whole-tensor form.
std::string fnChain(int levels, int uses, bool wholeTensor) {
  std::string source = "fn f0(x) = x * 0.5 + 1\n";
  for (int level = 1; level < levels; ++level) {
    std::string call = fmt::format("f{}(x)", level - 1);
    source += fmt::format("fn f{}(x) = {}{}\n", level, call, uses == 2 ? " * " + call : " + 1");
  }
  return source + fmt::format("kernel k(a: f32[N]) -> (y: f32[N]) {{\n    {} = f{}({})\n}}\n",
                              wholeTensor ? "y" : "y[i]", levels - 1, wholeTensor ? "a" : "a[i]");
}

}  // namespace

TEST_CASE("fn inlining is bounded: deep chains and doubling bodies are errors, found in linear time", "[errors]") {
  for (bool wholeTensor : {false, true}) {
    INFO((wholeTensor ? "whole-tensor form" : "index form"));
    // 3000 fns each calling the one before: the recursion of inlining (and of every later pass) is bounded.
    auto [deep, deepSeconds] = elaborationDiagnostics(fnChain(3000, 1, wholeTensor));
    CHECK_THAT(deep, Catch::Contains("error: fn nesting deeper than 100"));
    CHECK(deepSeconds < 5);
    // Each fn using the one before twice: 2^30 operations once copied out, refused at the call past 10^5.
    auto [doubling, doublingSeconds] = elaborationDiagnostics(fnChain(30, 2, wholeTensor));
    CHECK_THAT(doubling, Catch::Contains("error: the call of fn 'f14' expands to more than 100000 operations"));
    CHECK(doublingSeconds < 5);
    // Within the bounds both compile: 100 levels, and 2^12 operations built from 12 shared levels.
    for (const std::string& source : {fnChain(100, 1, wholeTensor), fnChain(13, 2, wholeTensor)}) {
      auto [none, seconds] = elaborationDiagnostics(source);
      CHECK(none.empty());
      CHECK(seconds < 5);
    }
  }
}

TEST_CASE("an error's notes are rendered after it, each with its place and a caret", "[errors]") {
  auto file = std::make_shared<const emmy::SourceFile>("model.py", "def forward(self, x):\n    return helper(x)\n");
  emmy::Diagnostics diagnostics;
  diagnostics.error(emmy::SourceLoc{file, 2, 12, 9}, "unsupported operation aten::sort",
                    {emmy::Diagnostic{emmy::SourceLoc{file, 1, 5, 7}, "where the code it calls does it", {}},
                     emmy::Diagnostic{emmy::SourceLoc{}, "without a place", {}}});
  CHECK(diagnostics.render() ==
        "model.py:2:12: error: unsupported operation aten::sort\n"
        "    return helper(x)\n"
        "           ^~~~~~~~~\n"
        "model.py:1:5: note: where the code it calls does it\n"
        "def forward(self, x):\n"
        "    ^~~~~~~\n"
        "emmy: note: without a place\n");
}
