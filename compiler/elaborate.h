// What `emmy build` and `emmy check` share before lowering: reading NAME=VALUE options and elaborating
// the kernels a command line selects.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "frontend/schedule.h"
#include "compiler/import.h"
#include "ir/tensor/nodes.h"
#include "support/diagnostics.h"

namespace emmy {

// `--size N=64` or `-D BM=64`, repeated: {N: 64}. Throws UsageError naming `option` for a malformed one,
// a negative value or a name given twice.
std::map<std::string, int64_t> parseNameValues(const std::vector<std::string>& specs, const std::string& option);

// `--scalar eps=1e-5`, repeated: the text of each value by name, parsed later in the scalar's dtype (which
// may differ between the instances of a generic kernel). Throws UsageError for a malformed one or a name
// given twice.
std::map<std::string, std::string> parseScalarOptions(const std::vector<std::string>& specs);

// The kernels of `file` that `selector` (--kernel; empty: all) picks, every schedule param set by
// `paramValues` (-D) or its default. Nullopt after errors were reported to `diagnostics`. Throws
// UsageError for a bad selector or a -D that no schedule of the file declares, nor the default policy.
// --size values apply to the kernels that have those sizes; one that none has is a UsageError.
void checkSizeNamesExist(const std::map<std::string, int64_t>& sizes, const std::vector<tensor::Kernel>& kernels);
// The same for --scalar values.
void checkScalarNamesExist(const std::map<std::string, std::string>& scalars, const std::vector<tensor::Kernel>& kernels);

// What an elaboration read besides the kernels: the files (the file and its imports, for --depfile) and
// the params the schedules of the kernels declare, and the default policy for what those leave open
// (the search space of `emmy tune`).
struct ElaborationDetails {
  std::vector<std::filesystem::path> loadedFiles;
  std::map<std::string, DeclaredParam> params;
};

// A TorchScript model (isTorchScriptModel) is imported first, with `modelImport`, and its source
// elaborated as if it were the file sourceName() names; ImportFailed when the import fails. `modelImport`
// given for a .emmy file is a UsageError.
// `details`, when given, receives the ElaborationDetails (for a model, the .pt file in place of its
// imported source).
std::optional<std::vector<tensor::Kernel>> elaborateFile(const std::string& file, const std::string& selector,
                                                         bool requireTypes,
                                                         const std::map<std::string, int64_t>& paramValues,
                                                         Diagnostics& diagnostics, ElaborationDetails* details = nullptr,
                                                         const ModelImportOptions& modelImport = {});

// The params the default policy declares for what the schedules of `kernels` leave open (each lowered
// to Tile IR, with the -D values it was elaborated with), by name. Kernels whose schedules have errors
// declare none here.
std::map<std::string, DeclaredParam> defaultPolicyParams(const std::vector<tensor::Kernel>& kernels);

}  // namespace emmy
