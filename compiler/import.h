// TorchScript models in the driver: recognised by name or content, imported by running `emmy-import`
// (importer/), which links LibTorch, as a child process, so that `emmy` itself starts in milliseconds.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace emmy {

struct ModelImportOptions {
  std::vector<std::string> inputs;  // --input x=f32[B,64], passed on as given
  std::string kernelName;           // --name; empty: forward
  std::string shapesFrom;           // emmy check --inputs DIR: ranks and dtypes of forward's arguments
};

// `emmy-import` failed: its exit code (1 errors in the model, 2 usage, 70 a bug) and what it printed.
class ImportFailed : public std::runtime_error {
public:
  ImportFailed(int exitCode, const std::string& output) : std::runtime_error(output), exitCode(exitCode) {}
  int exitCode;
};

// A `.pt` file, or any zip archive (how torch.jit.save writes a model).
bool isTorchScriptModel(const std::string& file);

// The name generated code says it came from: a model's is the .emmy file that `emmy import` would be
// asked to write next to it (MODEL.emmy), so that building MODEL.pt and building its imported source
// give the same CUDA.
std::string sourceName(const std::string& file);

// The model as .emmy source, or, with `outputFile`, the source written there (only on success).
// Throws ImportFailed.
std::string importModel(const std::string& model, const ModelImportOptions& options, const std::string& outputFile = "");

}  // namespace emmy
