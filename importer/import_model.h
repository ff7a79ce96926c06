// The TorchScript importer's API. LibTorch types stay behind it, so that only the importer's own
// sources (and the tests and benchmark that build models) compile LibTorch's headers.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/diagnostics.h"
#include "support/dtype.h"

namespace emmy::importer {

// `--input x=f32[B, 64]`: a forward argument's dtype and dims (numbers, size names, or empty or `?`
// for a size the importer names).
struct InputSpec {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::string> dims;  // "" where the importer names the size
};

// Parses NAME=DTYPE[d0,d1,...]. Throws UsageError.
InputSpec parseInputSpec(const std::string& text);

struct ImportOptions {
  std::string kernelName = "forward";
  std::vector<InputSpec> inputs;
  // Where forward arguments without --input take their dtype and rank from: DIR/NAME.npy (emmy check).
  std::string shapesFrom;
};

// A TorchScript module loaded, inlined, frozen with its parameters kept and simplified.
class LoadedModel;
struct LoadedModelDeleter {
  void operator()(LoadedModel* model) const;
};
using LoadedModelPtr = std::unique_ptr<LoadedModel, LoadedModelDeleter>;

// Loads `path` (torch::jit::load) and prepares forward's graph. Null after reporting to `diagnostics`
// why it could not (not a file, not TorchScript, no forward).
LoadedModelPtr loadModel(const std::string& path, Diagnostics& diagnostics);

// How many nodes forward's graph has after the passes (for the benchmark).
size_t graphNodeCount(const LoadedModel& model);

// The model's forward as .emmy source. Nullopt after reporting every operation it could not translate.
// The source is elaborated by Emmy's frontend before it is returned: one that does not elaborate is a bug
// (InternalError).
std::optional<std::string> translateModel(const LoadedModel& model, const ImportOptions& options,
                                          Diagnostics& diagnostics);

}  // namespace emmy::importer
