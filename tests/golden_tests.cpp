// Golden files of the IR levels: tests/golden/LEVEL/FOLDER/NAME.LEVEL holds the text `emmy build --emit
// LEVEL` prints for FOLDER/NAME.emmy (examples and stdlib). EMMY_UPDATE_GOLDEN=1 rewrites them; review the
// change as a diff.
#include <catch2/catch.hpp>

#include "frontend/frontend.h"
#include "golden_files.h"
#include "ir/tensor/printer.h"

namespace {

namespace fs = std::filesystem;
using emmy::testing::CurrentDirectory;

const fs::path kSourceDir = EMMY_SOURCE_DIR;

// What `emmy build FILE --emit tensor` prints, run from the source folder.
std::string tensorIrOf(const fs::path& relativePath) {
  CurrentDirectory inSourceDir(kSourceDir);
  emmy::Diagnostics diagnostics;
  emmy::Frontend frontend(diagnostics, {emmy::Frontend::defaultStdlibDir()});
  std::string text;
  if (const emmy::ast::Module* module = frontend.loadFile(relativePath))
    for (const emmy::tensor::Kernel& kernel : frontend.elaborateAll(*module))
      text += (text.empty() ? "" : "\n") + emmy::tensor::printKernel(kernel);
  INFO(diagnostics.render());
  REQUIRE_FALSE(diagnostics.hasErrors());
  return text;
}

}  // namespace

TEST_CASE("Tensor IR of every example and stdlib module matches its golden file", "[golden]") {
  for (const char* folder : {"examples", "stdlib"}) {
    for (const fs::path& source : emmy::testing::sortedFiles(kSourceDir / folder, ".emmy")) {
      fs::path relative = fs::path(folder) / source.filename();
      INFO(relative.string());
      std::string actual = tensorIrOf(relative);
      CHECK(actual == tensorIrOf(relative));  // byte-identical between runs
      emmy::testing::checkGoldenFile(
          kSourceDir / "tests" / "golden" / "tensor" / folder / (source.stem().string() + ".tensor"), actual);
    }
  }
}
