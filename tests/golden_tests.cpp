// Golden files of the IR levels: tests/golden/LEVEL/FOLDER/NAME.LEVEL holds the text `emmy build --emit
// LEVEL` prints for FOLDER/NAME.emmy (examples and stdlib). EMMY_UPDATE_GOLDEN=1 rewrites them; review the
// change as a diff.
#include <catch2/catch.hpp>

#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "golden_files.h"
#include "ir/kernel/printer.h"
#include "ir/loop/printer.h"
#include "ir/tile/printer.h"
#include "ir/tensor/printer.h"

namespace {

namespace fs = std::filesystem;
using emmy::testing::CurrentDirectory;

const fs::path kSourceDir = EMMY_SOURCE_DIR;

// What `emmy build FILE --emit LEVEL` prints (for cuda: the .cu file), run from the source folder.
std::string irOf(const fs::path& relativePath, const std::string& level) {
  CurrentDirectory inSourceDir(kSourceDir);
  emmy::Diagnostics diagnostics;
  emmy::Frontend frontend(diagnostics, {emmy::Frontend::defaultStdlibDir()});
  std::vector<emmy::Lowered> lowered;
  if (const emmy::ast::Module* module = frontend.loadFile(relativePath))
    for (const emmy::tensor::Kernel& kernel : frontend.elaborateAll(*module))
      lowered.push_back(emmy::lower(kernel, emmy::PipelineOptions{}));
  INFO(diagnostics.render());
  REQUIRE_FALSE(diagnostics.hasErrors());
  if (level == "cuda") return emmy::emitCudaFiles(lowered, relativePath.string()).source;
  std::string text;
  for (const emmy::Lowered& instance : lowered) {
    text += text.empty() ? "" : "\n";
    if (level == "tensor") text += emmy::tensor::printKernel(instance.tensor);
    if (level == "loop") text += emmy::loop::printProgram(instance.loop);
    if (level == "tile") text += emmy::tile::printProgram(instance.tile);
    if (level == "schedule") text += emmy::tile::printSchedule(instance.tile);
    if (level == "kernel") text += emmy::kernel::printProgram(instance.kernel);
  }
  return text;
}

}  // namespace

TEST_CASE("every IR level of every example and stdlib module matches its golden file", "[golden]") {
  for (const char* level : {"tensor", "loop", "tile", "schedule", "kernel", "cuda"}) {
    for (const char* folder : {"examples", "stdlib"}) {
      for (const fs::path& source : emmy::testing::sortedFiles(kSourceDir / folder, ".emmy")) {
        fs::path relative = fs::path(folder) / source.filename();
        INFO(relative.string() << " at level " << level);
        std::string actual = irOf(relative, level);
        CHECK(actual == irOf(relative, level));  // byte-identical between runs
        emmy::testing::checkGoldenFile(
            kSourceDir / "tests" / "golden" / level / folder / (source.stem().string() + (level == std::string("cuda") ? ".cu" : "." + std::string(level))), actual);
      }
    }
  }
}
