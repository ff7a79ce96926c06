#include "compiler/elaborate.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "support/text.h"

namespace emmy {

std::map<std::string, int64_t> parseNameValues(const std::vector<std::string>& specs, const std::string& option) {
  std::map<std::string, int64_t> values;
  for (const std::string& spec : specs) {
    size_t equals = spec.find('=');
    std::string name = spec.substr(0, equals), value = equals == std::string::npos ? "" : spec.substr(equals + 1);
    size_t parsed = 0;
    int64_t number = -1;
    try {
      number = std::stoll(value, &parsed);
    } catch (const std::exception&) {
      parsed = 0;
    }
    if (name.empty() || parsed == 0 || parsed != value.size() || number < 0)
      throw UsageError(fmt::format("{} '{}': expected NAME=VALUE with a non-negative integer VALUE", option, spec));
    if (!values.emplace(name, number).second) throw UsageError(fmt::format("{} {} is given twice", option, name));
  }
  return values;
}

std::map<std::string, std::string> parseScalarOptions(const std::vector<std::string>& specs) {
  std::map<std::string, std::string> values;
  for (const std::string& spec : specs) {
    size_t equals = spec.find('=');
    if (equals == 0 || equals == std::string::npos || equals + 1 == spec.size())
      throw UsageError(fmt::format("--scalar '{}': expected NAME=VALUE, as eps=1e-5", spec));
    std::string name = spec.substr(0, equals);
    if (!values.emplace(name, spec.substr(equals + 1)).second)
      throw UsageError(fmt::format("--scalar {} is given twice", name));
  }
  return values;
}

namespace {

// When several kernels are checked, a --size or --scalar applies to those that have it; one that none
// has is a mistake. `namesOf` gives a kernel's names of that kind ("size", "scalar").
template <typename Values, typename NamesOf>
void checkNamesExist(const Values& given, const std::vector<tensor::Kernel>& kernels, const std::string& kind,
                     NamesOf namesOf) {
  std::set<std::string> known;
  for (const tensor::Kernel& kernel : kernels)
    for (const std::string& name : namesOf(kernel)) known.insert(name);
  std::vector<std::string> candidates(known.begin(), known.end());
  for (const auto& [name, value] : given)
    if (!known.count(name))
      throw UsageError(withSuggestion(
          fmt::format("--{} {}: no kernel checked has a {} named {}{}", kind, name, kind, name,
                      candidates.empty() ? fmt::format(" (they have no {}s)", kind)
                                         : fmt::format(" ({}s: {})", kind, join(candidates, ", "))),
          name, candidates));
}

}  // namespace

void checkSizeNamesExist(const std::map<std::string, int64_t>& sizes, const std::vector<tensor::Kernel>& kernels) {
  checkNamesExist(sizes, kernels, "size", [](const tensor::Kernel& kernel) { return kernel.sizes; });
}

void checkScalarNamesExist(const std::map<std::string, std::string>& scalars, const std::vector<tensor::Kernel>& kernels) {
  checkNamesExist(scalars, kernels, "scalar", [](const tensor::Kernel& kernel) {
    std::vector<std::string> names;
    for (const tensor::ScalarParamDecl& scalar : kernel.scalars) names.push_back(scalar.name);
    return names;
  });
}

std::optional<std::vector<tensor::Kernel>> elaborateFile(const std::string& file, const std::string& selector,
                                                         bool requireTypes,
                                                         const std::map<std::string, int64_t>& paramValues,
                                                         Diagnostics& diagnostics, ElaborationDetails* details,
                                                         const ModelImportOptions& modelImport) {
  namespace fs = std::filesystem;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  frontend.setParamValues(paramValues);
  bool model = isTorchScriptModel(file);
  if (!model && (!modelImport.inputs.empty() || !modelImport.kernelName.empty()))
    throw UsageError(fmt::format("--input and --name are for TorchScript models, and {} is not one", file));
  // A model's source is compiled under the name of the .emmy file it would be imported as.
  fs::path imported = fs::path(file).replace_extension(".emmy");
  const ast::Module* module = model ? frontend.loadText(imported.string(), importModel(file, modelImport), imported.parent_path())
                                    : frontend.loadFile(file);
  if (!module) return std::nullopt;
  std::vector<tensor::Kernel> kernels = selector.empty() ? frontend.elaborateAll(*module)
                                                         : frontend.elaborateSelected(*module, selector, requireTypes);
  if (diagnostics.hasErrors()) {
    // The schedules of the kernels that did elaborate are checked too: their errors are independent ones.
    PipelineOptions toTile;
    toTile.stopAfter = Level::Tile;
    try {
      lowerAll(kernels, toTile);
    } catch (const CompilationFailed& failed) {
      diagnostics.append(failed.diagnostics);
    }
    return std::nullopt;
  }
  // The schedules' params, then (when they are needed) the default policy's for what those leave open.
  std::map<std::string, DeclaredParam> known = frontend.declaredParams();
  bool unknown = std::any_of(paramValues.begin(), paramValues.end(), [&](const auto& given) { return !known.count(given.first); });
  if (details || unknown) known.merge(defaultPolicyParams(kernels));
  if (details) {
    details->loadedFiles = model ? std::vector<fs::path>{file} : std::vector<fs::path>{};
    for (const fs::path& loaded : frontend.loadedFiles())
      if (!model || loaded != imported) details->loadedFiles.push_back(loaded);
    details->params = known;
  }
  std::vector<std::string> names;
  for (const auto& [name, param] : known) names.push_back(name);
  for (const auto& [name, value] : paramValues)
    if (!known.count(name))
      throw UsageError(withSuggestion(
          fmt::format("-D {}: no schedule of the kernels built declares a param {}, nor does the default policy{}", name,
                      name, names.empty() ? "" : " (params: " + join(names, ", ") + ")"),
          name, names));
  return kernels;
}

std::map<std::string, DeclaredParam> defaultPolicyParams(const std::vector<tensor::Kernel>& kernels) {
  std::map<std::string, DeclaredParam> params;
  PipelineOptions toTile;
  toTile.stopAfter = Level::Tile;
  for (const tensor::Kernel& kernel : kernels) {
    try {
      for (const tensor::ScheduleParam& param : lower(kernel, toTile).tile.params)
        params.emplace(param.name, DeclaredParam{param.candidates, param.defaultValue});
    } catch (const CompilationFailed&) {
      // The schedule's errors are reported when the kernel is built.
    }
  }
  return params;
}

}  // namespace emmy
