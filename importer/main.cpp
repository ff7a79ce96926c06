// emmy-import: a TorchScript model in, .emmy source out (LANGUAGE.md section 6). `emmy import`, and
// `emmy build|check MODEL.pt`, run it as a child process, so that `emmy` itself never loads LibTorch.
// Exit codes as emmy's: 0 success, 1 errors in the model, 2 usage errors, 70 internal errors (bugs).
#include <cstdio>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "importer/import_model.h"
#include "support/files.h"

namespace {

using namespace emmy;

// Errors with a place in the TorchScript source as `FILE:LINE:COL: error:` with the line and a caret;
// the others as `MODEL.pt: error:`.
int report(const Diagnostics& diagnostics, const std::string& model) {
  for (const Diagnostic& diagnostic : diagnostics.errors())
    std::fputs((diagnostic.loc.valid() ? renderDiagnostic(diagnostic)
                                       : fmt::format("{}: error: {}\n", model, diagnostic.message)).c_str(),
               stderr);
  return kExitUserError;
}

int run(const std::string& model, const std::string& output, const importer::ImportOptions& options) {
  Diagnostics diagnostics;
  importer::LoadedModelPtr loaded = importer::loadModel(model, diagnostics);
  if (!loaded) return report(diagnostics, model);
  std::optional<std::string> source = importer::translateModel(*loaded, options, diagnostics);
  if (!source) return report(diagnostics, model);
  if (output.empty()) {
    std::fputs(source->c_str(), stdout);
    return 0;
  }
  std::error_code ignored;
  if (std::filesystem::path(output).has_parent_path())
    std::filesystem::create_directories(std::filesystem::path(output).parent_path(), ignored);
  writeFilesTogether({{output, *source}});  // nothing half-written
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"emmy-import: a TorchScript model (torch.jit.script or torch.jit.trace, saved) to .emmy source"};
  std::string model, output;
  std::vector<std::string> inputs;
  importer::ImportOptions options;
  app.add_option("MODEL", model, "the TorchScript file (.pt)")->required();
  app.add_option("-o", output, "write the .emmy source to FILE (default: standard output)");
  app.add_option("--name", options.kernelName, "the kernel's name (default: forward)");
  app.add_option("--input", inputs, "a forward argument's dtype and dims, as x=f32[B,64] (repeatable)");
  app.add_option("--shapes-from", options.shapesFrom,
                 "take the dtype and rank of arguments without --input from DIR/NAME.npy");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitUsageError;
  }
  return runReportingFailures("emmy import", [&] {
    for (const std::string& input : inputs) options.inputs.push_back(importer::parseInputSpec(input));
    return run(model, output, options);
  });
}
