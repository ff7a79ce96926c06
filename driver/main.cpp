// The `emmy` command line. Exit codes: 0 success, 1 user errors (diagnostics), 2 usage errors,
// 70 internal errors (bugs). It links no LibTorch so that it starts in milliseconds.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "frontend/frontend.h"
#include "ir/tensor/printer.h"
#include "support/diagnostics.h"

namespace {

namespace fs = std::filesystem;
using namespace emmy;

constexpr int kUserError = 1;
constexpr int kUsageError = 2;
constexpr int kInternalError = 70;

struct BuildOptions {
  std::string file;
  std::string outputDir;
  std::string emit;
  std::string kernel;
};

// The levels `--emit` names (spec section 6); this version produces `tensor`.
const std::vector<std::string> kEmitLevels = {"tensor", "loop", "tile", "kernel", "cuda", "ptx", "cubin", "schedule"};

int reportDiagnostics(const Diagnostics& diagnostics) {
  std::fputs(diagnostics.render().c_str(), stderr);
  return kUserError;
}

// Writes `text` to DIR/NAME, or to standard output without -o.
int emitText(const BuildOptions& options, const std::string& fileName, const std::string& text) {
  if (options.outputDir.empty()) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  std::error_code ec;
  fs::create_directories(options.outputDir, ec);
  fs::path path = fs::path(options.outputDir) / fileName;
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw UsageError(fmt::format("cannot write {}", path.string()));
  return 0;
}

int build(const BuildOptions& options) {
  if (fs::path(options.file).extension() == ".pt")
    throw UsageError("importing TorchScript models is not available in this version yet");
  std::string emit = options.emit.empty() ? "cuda" : options.emit;
  if (emit != "tensor")
    throw UsageError(fmt::format("--emit {} is not available in this version yet: lowering below Tensor IR comes "
                                 "next; use --emit tensor",
                                 emit));
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  const ast::Module* module = frontend.loadFile(options.file);
  if (!module) return reportDiagnostics(diagnostics);
  std::vector<tensor::Kernel> kernels = options.kernel.empty()
                                            ? frontend.elaborateAll(*module)
                                            : frontend.elaborateSelected(*module, options.kernel, false);
  if (diagnostics.hasErrors()) return reportDiagnostics(diagnostics);
  std::string text;
  for (const tensor::Kernel& kernel : kernels) text += (text.empty() ? "" : "\n") + tensor::printKernel(kernel);
  return emitText(options, fs::path(options.file).stem().string() + ".tensor", text);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Emmy: a compiler from small tensor programs to CUDA"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "emmy 0.1");

  BuildOptions buildOptions;
  CLI::App* buildCommand = app.add_subcommand("build", "compile a .emmy file");
  buildCommand->add_option("FILE", buildOptions.file, "the .emmy file")->required();
  buildCommand->add_option("-o", buildOptions.outputDir, "output folder (default: print to standard output)");
  buildCommand->add_option("--emit", buildOptions.emit, "what to produce")
      ->check(CLI::IsMember(kEmitLevels));
  buildCommand->add_option("--kernel", buildOptions.kernel, "one kernel: NAME or NAME<TYPE, ...>");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kUsageError;
  }
  try {
    if (*buildCommand) return build(buildOptions);
  } catch (const UsageError& e) {
    fmt::print(stderr, "emmy: error: {}\n", e.what());
    return kUsageError;
  } catch (const InternalError& e) {
    fmt::print(stderr, "emmy: {}\n", e.what());
    return kInternalError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "emmy: internal error (this is a bug in Emmy, please report it): {}\n", e.what());
    return kInternalError;
  }
  return kUsageError;
}
