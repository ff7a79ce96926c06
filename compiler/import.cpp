#include "compiler/import.h"

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "support/process.h"

namespace emmy {

namespace fs = std::filesystem;

namespace {

// LibTorch loads in seconds on a cold cache, and a large model takes longer to walk; a limit this long
// only stops a hang.
constexpr std::chrono::seconds kImportTimeout{600};

// emmy-import, installed and built next to emmy.
fs::path importerPath() {
  std::error_code ignored;
  return fs::read_symlink("/proc/self/exe", ignored).parent_path() / "emmy-import";
}

}  // namespace

bool isTorchScriptModel(const std::string& file) {
  if (fs::path(file).extension() == ".pt") return true;
  std::error_code ignored;
  if (!fs::is_regular_file(file, ignored)) return false;  // opening a FIFO would wait for a writer
  std::ifstream in(file, std::ios::binary);
  char magic[4] = {};
  in.read(magic, sizeof magic);
  return in.gcount() == 4 && std::string(magic, 4) == std::string("PK\x03\x04", 4);
}

std::string sourceName(const std::string& file) {
  return isTorchScriptModel(file) ? fs::path(file).replace_extension(".emmy").filename().string()
                                  : fs::path(file).filename().string();
}

std::string importModel(const std::string& model, const ModelImportOptions& options, const std::string& outputFile) {
  fs::path importer = importerPath();
  std::error_code ignored;
  if (!fs::is_regular_file(importer, ignored))
    throw ImportFailed(1, fmt::format("emmy: error: this emmy was built without the LibTorch importer ({} is missing), "
                                      "so it cannot read {}\n", importer.string(), model));
  TemporaryFolder scratch;
  fs::path written = outputFile.empty() ? scratch.path() / "imported.emmy" : fs::path(outputFile);
  // Run in this folder, so that the paths are the user's and its messages name the model as they did.
  std::vector<std::string> argv = {importer.string(), model, "-o", written.string()};
  for (const std::string& input : options.inputs) argv.insert(argv.end(), {"--input", input});
  if (!options.kernelName.empty()) argv.insert(argv.end(), {"--name", options.kernelName});
  if (!options.shapesFrom.empty()) argv.insert(argv.end(), {"--shapes-from", options.shapesFrom});
  ProcessOutcome outcome = runProcess(argv, fs::current_path(), scratch.path() / "import.log", kImportTimeout);
  if (outcome.kind == ProcessOutcome::Kind::TimedOut)
    throw ImportFailed(1, fmt::format("emmy: error: importing {} did not finish within {} s\n", model, kImportTimeout.count()));
  if (outcome.kind == ProcessOutcome::Kind::Signaled)
    throw ImportFailed(70, fmt::format("{}emmy: internal error (this is a bug in Emmy, please report it): emmy-import "
                                       "was killed by signal {} while importing {}\n", outcome.output, outcome.code, model));
  if (outcome.code != 0) throw ImportFailed(outcome.code, outcome.output);
  return readWholeFile(written);
}

}  // namespace emmy
