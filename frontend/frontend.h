// The .emmy frontend: files and their imports in, Tensor IR kernels out.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "frontend/ast.h"
#include "frontend/schedule.h"
#include "ir/tensor/nodes.h"
#include "support/diagnostics.h"

namespace emmy {

class Elaborator;
struct LoadedModule;

// Loads a file and everything it imports, and instantiates its kernels as Tensor IR. All errors go to
// the Diagnostics given at construction; a method that cannot produce its result returns nullopt/empty
// after reporting why.
class Frontend {
public:
  // `searchPath`: folders where `import M` looks for M.emmy after the importing file's own folder
  // (normally just the standard library).
  Frontend(Diagnostics& diagnostics, std::vector<std::filesystem::path> searchPath);
  ~Frontend();

  // Parses `path` and, recursively, its imports. Returns the root module, or null after errors.
  const ast::Module* loadFile(const std::filesystem::path& path);
  // The same for text that is not on disk (tests, the fuzzer); imports resolve against `directory`.
  const ast::Module* loadText(const std::string& displayPath, std::string text,
                              const std::filesystem::path& directory = ".");

  // Every kernel of `module`: each type of a generic kernel's bound, in the bound's order.
  std::vector<tensor::Kernel> elaborateAll(const ast::Module& module);
  // One kernel by `--kernel` spelling: "softmax" or "softmax<f16>". A generic kernel needs its types
  // when `requireTypes` is set (emmy check); otherwise every type is elaborated.
  std::vector<tensor::Kernel> elaborateSelected(const ast::Module& module, const std::string& selector,
                                                bool requireTypes);

  // Values for schedule params (`-D P=V`), used by the elaborate calls after it.
  void setParamValues(std::map<std::string, int64_t> values);
  // Every param the schedules elaborated so far declare, by name, those of called kernels included (so
  // that a `-D` nobody uses is reported, and for the search space of `emmy tune`).
  const std::map<std::string, DeclaredParam>& declaredParams() const;

  // The files of every module loaded so far (for build systems: what the output depends on).
  std::vector<std::filesystem::path> loadedFiles() const;

  // The folder of the standard library this build uses: $EMMY_STDLIB if set, else PREFIX/share/emmy/stdlib
  // next to an installed emmy, else the source tree's.
  static std::filesystem::path defaultStdlibDir();

private:
  std::vector<tensor::Kernel> instantiate(const LoadedModule& module, const ast::KernelDef& def,
                                          const std::vector<std::map<std::string, DType>>& instances,
                                          const std::map<std::string, int64_t>& integers);

  Diagnostics& diagnostics_;
  std::unique_ptr<Elaborator> elaborator_;
};

}  // namespace emmy
