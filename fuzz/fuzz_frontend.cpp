// libFuzzer entry point over the parser, the elaborator and the lowering: any bytes, taken as the text
// of a .emmy file, must come out as CUDA (through every IR level, each verified) or as diagnostics (a
// schedule's come as CompilationFailed). Nothing else is caught here: an escaping exception (an
// InternalError is a bug) aborts, and so does a sanitizer report, which is how libFuzzer records the
// input that caused it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "compiler/pipeline.h"
#include "frontend/frontend.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using emmy::Frontend;
  // Imports resolve in the standard library only, so that no run depends on the current directory.
  static const std::filesystem::path stdlib = Frontend::defaultStdlibDir();
  emmy::Diagnostics diagnostics;
  Frontend frontend(diagnostics, {stdlib});
  std::string text(reinterpret_cast<const char*>(data), size);
  if (const emmy::ast::Module* module = frontend.loadText("fuzz.emmy", std::move(text), stdlib)) {
    std::vector<emmy::Lowered> lowered;
    try {
      for (const emmy::tensor::Kernel& kernel : frontend.elaborateAll(*module))
        lowered.push_back(emmy::lower(kernel, emmy::PipelineOptions{}));
      emmy::emitCudaFiles(lowered, "fuzz.emmy");
    } catch (const emmy::CompilationFailed& failed) {
      failed.diagnostics.render();
    }
  }
  // Rendering must cope with every location the frontend reports (line ends, tabs, invalid UTF-8).
  diagnostics.render();
  return 0;
}
