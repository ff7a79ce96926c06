#include "frontend/frontend.h"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include "frontend/elaborator.h"
#include "frontend/parser.h"
#include "frontend/schedule.h"
#include "support/cpp_names.h"
#include "support/files.h"
#include "support/text.h"

namespace emmy {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------------
// Modules

Elaborator::Elaborator(Diagnostics& diagnostics, std::vector<fs::path> searchPath)
    : diagnostics_(diagnostics), searchPath_(std::move(searchPath)) {}

namespace {

std::string canonicalKey(const fs::path& path) {
  std::error_code ignored;
  fs::path canonical = fs::weakly_canonical(path, ignored);
  return (canonical.empty() ? path : canonical).string();
}

}  // namespace

const LoadedModule* Elaborator::loadFile(const fs::path& path, const std::string& displayPath) {
  std::string whyNot;
  std::optional<std::string> text = readRegularFile(path, kMaxSourceFileBytes, whyNot);
  if (!text) {
    diagnostics_.error(fmt::format("cannot read {}: {}", displayPath, whyNot));
    return nullptr;
  }
  return load(canonicalKey(path), displayPath, std::move(*text), path.parent_path(), SourceLoc{});
}

const LoadedModule* Elaborator::loadText(const std::string& displayPath, std::string text, const fs::path& directory) {
  return load("<text>/" + displayPath, displayPath, std::move(text), directory, SourceLoc{});
}

const LoadedModule* Elaborator::moduleOf(const ast::Module& module) const {
  for (const auto& [key, loaded] : modules_)
    if (loaded->ast.get() == &module) return loaded.get();
  return nullptr;
}

const LoadedModule* Elaborator::load(const std::string& key, const std::string& displayPath, std::string text,
                                     const fs::path& directory, const SourceLoc& importedFrom) {
  if (auto found = modules_.find(key); found != modules_.end()) return found->second.get();
  if (std::find(loading_.begin(), loading_.end(), key) != loading_.end()) {
    diagnostics_.error(importedFrom, fmt::format("import cycle: {} imports itself through its imports", displayPath));
    return nullptr;
  }
  auto source = std::make_shared<const SourceFile>(displayPath, std::move(text));
  std::unique_ptr<ast::Module> tree = parseModule(source, diagnostics_);
  if (!tree) return nullptr;
  auto module = std::make_unique<LoadedModule>();
  module->ast = std::move(tree);
  module->directory = directory;
  loading_.push_back(key);
  resolveImports(*module);
  loading_.pop_back();
  indexDefinitions(*module);
  checkFnRecursion(*module);
  return modules_.emplace(key, std::move(module)).first->second.get();
}

void Elaborator::resolveImports(LoadedModule& module) {
  for (const ast::Import& import : module.ast->imports) {
    const std::string& name = import.module.name;
    if (module.imports.count(name)) continue;  // importing twice is harmless
    std::vector<fs::path> candidates{module.directory / (name + ".emmy")};
    for (const fs::path& folder : searchPath_) candidates.push_back(folder / (name + ".emmy"));
    const LoadedModule* imported = nullptr;
    bool found = false;
    for (const fs::path& candidate : candidates) {
      std::error_code ec;
      if (!fs::is_regular_file(candidate, ec)) continue;
      found = true;
      std::string whyNot;
      std::optional<std::string> text = readRegularFile(candidate, kMaxSourceFileBytes, whyNot);
      if (!text) {
        diagnostics_.error(import.module.loc,
                           fmt::format("cannot read module '{}' at {}: {}", name, candidate.string(), whyNot));
        break;
      }
      imported = load(canonicalKey(candidate), candidate.string(), std::move(*text), candidate.parent_path(),
                      import.module.loc);
      break;
    }
    if (!found) {
      std::vector<std::string> available;
      for (const fs::path& folder : searchPath_) {
        std::error_code ec;
        for (const auto& entry : fs::directory_iterator(folder, ec))
          if (entry.path().extension() == ".emmy") available.push_back(entry.path().stem().string());
      }
      diagnostics_.error(import.module.loc,
                         withSuggestion(fmt::format("unknown module '{}': no {}.emmy next to {} or in the standard library",
                                                    name, name, module.ast->source->path()),
                                        name, available));
    }
    if (imported) module.imports[name] = imported;
  }
}

void Elaborator::indexDefinitions(LoadedModule& module) {
  std::map<std::string, SourceLoc> seen;
  auto define = [&](const ast::Ident& name) {
    auto [it, fresh] = seen.emplace(name.name, name.loc);
    if (!fresh)
      diagnostics_.error(name.loc, fmt::format("duplicate definition of '{}' (first defined at {}:{})", name.name,
                                               it->second.line, it->second.column));
    return fresh;
  };
  for (const ast::FnDef& fn : module.ast->fns)
    if (define(fn.name)) module.fns[fn.name.name] = &fn;
  for (const ast::KernelDef& kernel : module.ast->kernels)
    if (define(kernel.name)) module.kernels[kernel.name.name] = &kernel;
  checkHostFunctionNames(module);
  std::vector<const ast::Schedule*> valid;
  for (const ast::Schedule& schedule : module.ast->schedules) {
    const std::string& name = schedule.kernel.name;
    if (!module.kernels.count(name)) {
      std::vector<std::string> kernels;
      for (const auto& [kernelName, def] : module.kernels) kernels.push_back(kernelName);
      diagnostics_.error(schedule.kernel.loc,
                         withSuggestion(fmt::format("schedule for unknown kernel '{}'", name), name, kernels));
      continue;
    }
    if (!checkScheduleTypes(schedule, *module.kernels.at(name))) continue;
    for (const ast::Schedule* earlier : valid)
      if (earlier->kernel.name == name && schedulesOverlap(*earlier, schedule)) {
        diagnostics_.error(schedule.kernel.loc,
                           fmt::format("kernel '{}' already has a schedule {}(at {}:{})", name,
                                       schedule.typed() ? "for these instances " : "", earlier->kernel.loc.line,
                                       earlier->kernel.loc.column));
        break;
      }
    valid.push_back(&schedule);
  }
}

// A typed schedule's lists (`schedule NAME<A | B, C, P = 1>`): one per type parameter of the kernel, of
// types its bound allows, or none; then values of integer parameters of the kernel, each named once.
bool Elaborator::checkScheduleTypes(const ast::Schedule& schedule, const ast::KernelDef& kernel) {
  const std::string& name = kernel.name.name;
  bool ok = true;
  std::set<std::string> named;
  for (const ast::Schedule::IntegerChoice& choice : schedule.integers) {
    std::vector<std::string> integers;
    for (const ast::IntegerParam& param : kernel.integerParams) integers.push_back(param.name.name);
    if (std::find(integers.begin(), integers.end(), choice.param.name) == integers.end()) {
      diagnostics_.error(choice.param.loc, withSuggestion(fmt::format("'{}' is not an integer parameter of kernel '{}' ({})",
                                                                      choice.param.name, name,
                                                                      integers.empty() ? "it has none" : join(integers, ", ")),
                                                          choice.param.name, integers));
      ok = false;
    } else if (!named.insert(choice.param.name).second) {
      diagnostics_.error(choice.param.loc, fmt::format("schedule {} names the values of {} twice", name, choice.param.name));
      ok = false;
    }
  }
  if (schedule.types.empty()) return ok;
  if (schedule.types.size() != kernel.typeParams.size()) {
    diagnostics_.error(schedule.kernel.loc, fmt::format("schedule {} gives {} list{} of types, and kernel '{}' has {} type "
                                                        "parameter{}", name, schedule.types.size(),
                                                        schedule.types.size() == 1 ? "" : "s", name,
                                                        kernel.typeParams.size(), kernel.typeParams.size() == 1 ? "" : "s"));
    return false;
  }
  for (size_t p = 0; p < schedule.types.size(); ++p) {
    std::vector<std::string> bound;
    for (const ast::Ident& allowed : kernel.typeParams[p].bound) bound.push_back(allowed.name);
    for (const ast::Ident& type : schedule.types[p])
      if (std::find(bound.begin(), bound.end(), type.name) == bound.end()) {
        diagnostics_.error(type.loc, withSuggestion(fmt::format("'{}' is not a type {} of kernel '{}' takes ({})", type.name,
                                                                kernel.typeParams[p].name.name, name, join(bound, " | ")),
                                                    type.name, bound));
        ok = false;
      }
  }
  return ok;
}

// Two schedules of one kernel that could both apply to an instance: both untyped, or typed with a type
// in common for every type parameter (a schedule without lists takes every type) and a value in common
// for every integer parameter both name.
bool Elaborator::schedulesOverlap(const ast::Schedule& a, const ast::Schedule& b) {
  if (!a.typed() || !b.typed()) return !a.typed() && !b.typed();
  for (size_t p = 0; p < a.types.size() && p < b.types.size(); ++p) {
    bool common = false;
    for (const ast::Ident& x : a.types[p])
      for (const ast::Ident& y : b.types[p]) common = common || x.name == y.name;
    if (!common) return false;
  }
  for (const ast::Schedule::IntegerChoice& x : a.integers)
    for (const ast::Schedule::IntegerChoice& y : b.integers) {
      if (x.param.name != y.param.name) continue;
      bool common = false;
      for (int64_t value : x.values) common = common || std::count(y.values.begin(), y.values.end(), value);
      if (!common) return false;
    }
  return true;
}

namespace {

// The C names of a kernel's host functions: NAME, or NAME_T1_T2... for each choice of its type parameters.
std::vector<std::string> hostFunctionNames(const ast::KernelDef& kernel) {
  std::vector<std::string> names{kernel.name.name};
  for (const ast::TypeParam& param : kernel.typeParams) {
    std::vector<std::string> longer;
    for (const std::string& name : names)
      for (const ast::Ident& dtype : param.bound) longer.push_back(name + "_" + dtype.name);
    names = std::move(longer);
  }
  return names;
}

}  // namespace

// Each kernel becomes C functions of the generated header: their names must be ones C allows there, and
// no two kernels may make the same one (`softmax_f16` beside `softmax<T: f16 | ...>`).
void Elaborator::checkHostFunctionNames(const LoadedModule& module) {
  std::map<std::string, const ast::KernelDef*> owners;
  for (const ast::KernelDef& kernel : module.ast->kernels) {
    if (std::optional<std::string> problem = kernelNameProblem(kernel.name.name)) {
      diagnostics_.error(kernel.name.loc, *problem);
      continue;
    }
    for (const std::string& name : hostFunctionNames(kernel)) {
      auto [it, fresh] = owners.emplace(name, &kernel);
      if (fresh || it->second == &kernel) continue;
      const ast::KernelDef& first = *it->second;
      diagnostics_.error(kernel.name.loc,
                         fmt::format("kernel '{}' and kernel '{}' (at {}:{}) would both have the host function '{}'; "
                                     "rename one of them",
                                     kernel.name.name, first.name.name, first.name.loc.line, first.name.loc.column, name));
      break;
    }
  }
}

namespace {

// Calls of fns of the same module made by `e`, in source order.
void collectFnCalls(const ast::Expr& e, const LoadedModule& module, std::vector<std::pair<const ast::FnDef*, SourceLoc>>& out) {
  switch (e.kind) {
    case ast::ExprKind::Call: {
      const auto& call = static_cast<const ast::Call&>(e);
      if (!call.module)
        if (auto fn = module.fns.find(call.callee.name); fn != module.fns.end()) out.push_back({fn->second, call.callee.loc});
      for (const ast::Argument& arg : call.args) collectFnCalls(*arg.value, module, out);
      break;
    }
    case ast::ExprKind::Subscript: {
      const auto& s = static_cast<const ast::Subscript&>(e);
      collectFnCalls(*s.base, module, out);
      for (const ast::ExprPtr& index : s.indices) collectFnCalls(*index, module, out);
      break;
    }
    case ast::ExprKind::List:
      for (const ast::ExprPtr& element : static_cast<const ast::List&>(e).elements) collectFnCalls(*element, module, out);
      break;
    case ast::ExprKind::Reduction: collectFnCalls(*static_cast<const ast::Reduction&>(e).body, module, out); break;
    case ast::ExprKind::Unary: collectFnCalls(*static_cast<const ast::Unary&>(e).operand, module, out); break;
    case ast::ExprKind::Binary: {
      const auto& b = static_cast<const ast::Binary&>(e);
      collectFnCalls(*b.lhs, module, out);
      collectFnCalls(*b.rhs, module, out);
      break;
    }
    default: break;
  }
}

}  // namespace

void Elaborator::checkFnRecursion(const LoadedModule& module) {
  // Depth-first search over the call graph of the module's fns; a call back into the current path is
  // reported once, at that call.
  std::map<const ast::FnDef*, int> state;  // 1: on the path, 2: done
  std::function<void(const ast::FnDef*)> visit = [&](const ast::FnDef* fn) {
    state[fn] = 1;
    std::vector<std::pair<const ast::FnDef*, SourceLoc>> calls;
    collectFnCalls(*fn->body, module, calls);
    for (const auto& [callee, loc] : calls) {
      if (state[callee] == 1)
        diagnostics_.error(loc, fmt::format("recursive call of fn '{}': fns are inlined and may not recurse",
                                            callee->name.name));
      else if (state[callee] == 0)
        visit(callee);
    }
    state[fn] = 2;
  };
  for (const ast::FnDef& fn : module.ast->fns)
    if (state[&fn] == 0) visit(&fn);
}

// ---------------------------------------------------------------------------------------------------
// Instances

const tensor::Kernel* Elaborator::instantiate(const LoadedModule& module, const ast::KernelDef& kernel,
                                              const TypeArguments& typeArguments, const IntegerArguments& given,
                                              const SourceLoc& use) {
  IntegerArguments integerArguments;
  for (const ast::IntegerParam& param : kernel.integerParams) {
    if (auto it = given.find(param.name.name); it != given.end()) {
      integerArguments[param.name.name] = it->second;
    } else if (param.defaultValue) {
      integerArguments[param.name.name] = *param.defaultValue;
    } else if (param.defaultParam) {
      auto earlier = integerArguments.find(param.defaultParam->name);
      if (earlier == integerArguments.end()) {
        diagnostics_.error(param.defaultParam->loc,
                           fmt::format("the default of {} must be a number or an integer parameter before it, not '{}'",
                                       param.name.name, param.defaultParam->name));
        return nullptr;
      }
      integerArguments[param.name.name] = earlier->second;
    } else {
      diagnostics_.error(use, fmt::format("the integer parameter {} of '{}' has no default and no value here; give "
                                          "it, as {}=... in a call or --kernel '{}<{}=...>'",
                                          param.name.name, kernel.name.name, param.name.name, kernel.name.name,
                                          param.name.name));
      return nullptr;
    }
  }
  std::string key = fmt::format("{}:{}", module.ast->source->path(), kernel.name.name);
  for (const auto& [param, dtype] : typeArguments) key += fmt::format(":{}={}", param, dtypeName(dtype));
  for (const auto& [param, value] : integerArguments) key += fmt::format(":{}={}", param, value);
  if (auto found = instances_.find(key); found != instances_.end())
    return found->second ? &*found->second : nullptr;
  if (std::find(instantiating_.begin(), instantiating_.end(), key) != instantiating_.end()) {
    diagnostics_.error(use, fmt::format("recursive kernel call: '{}' calls itself", kernel.name.name));
    return nullptr;
  }
  ownSchedule(module, kernel, typeArguments, integerArguments);  // its errors are reported even where the kernel's body has some
  instantiating_.push_back(key);
  std::optional<tensor::Kernel> result = KernelElaboration(*this, module, kernel, typeArguments, integerArguments).run();
  instantiating_.pop_back();
  auto& slot = instances_[key] = std::move(result);
  return slot ? &*slot : nullptr;
}

const std::vector<tensor::Directive>& Elaborator::ownSchedule(const LoadedModule& module, const ast::KernelDef& kernel,
                                                              const TypeArguments& typeArguments,
                                                              const IntegerArguments& integerArguments) {
  // The typed schedule whose lists hold the instance's types and integers, else the untyped one.
  const ast::Schedule* chosen = nullptr;
  for (const ast::Schedule& written : module.ast->schedules) {
    if (written.kernel.name != kernel.name.name || written.types.size() != (written.types.empty() ? 0 : kernel.typeParams.size()))
      continue;
    bool takes = true;
    for (size_t p = 0; p < written.types.size(); ++p) {
      auto argument = typeArguments.find(kernel.typeParams[p].name.name);
      takes = takes && argument != typeArguments.end() &&
              std::any_of(written.types[p].begin(), written.types[p].end(),
                          [&](const ast::Ident& type) { return type.name == dtypeName(argument->second); });
    }
    for (const ast::Schedule::IntegerChoice& choice : written.integers) {
      auto argument = integerArguments.find(choice.param.name);
      takes = takes && argument != integerArguments.end() &&
              std::count(choice.values.begin(), choice.values.end(), argument->second);
    }
    if (takes && (!chosen || !chosen->typed())) chosen = &written;
  }
  auto [it, fresh] = ownSchedules_.try_emplace(chosen);
  if (fresh && chosen) {
    std::vector<std::string> typeParams;
    for (const ast::TypeParam& typeParam : kernel.typeParams) typeParams.push_back(typeParam.name.name);
    it->second = resolveSchedule(*chosen, paramValues_, typeParams, declaredParams_, diagnostics_);
  }
  return it->second;
}

// ---------------------------------------------------------------------------------------------------
// Frontend

Frontend::Frontend(Diagnostics& diagnostics, std::vector<fs::path> searchPath)
    : diagnostics_(diagnostics), elaborator_(std::make_unique<Elaborator>(diagnostics, std::move(searchPath))) {}

Frontend::~Frontend() = default;

void Frontend::setParamValues(std::map<std::string, int64_t> values) { elaborator_->setParamValues(std::move(values)); }

const std::map<std::string, DeclaredParam>& Frontend::declaredParams() const { return elaborator_->declaredParams(); }

const ast::Module* Frontend::loadFile(const fs::path& path) {
  const LoadedModule* module = elaborator_->loadFile(path, path.string());
  return module && !diagnostics_.hasErrors() ? module->ast.get() : nullptr;
}

const ast::Module* Frontend::loadText(const std::string& displayPath, std::string text, const fs::path& directory) {
  const LoadedModule* module = elaborator_->loadText(displayPath, std::move(text), directory);
  return module && !diagnostics_.hasErrors() ? module->ast.get() : nullptr;
}

namespace {

std::vector<TypeArguments> everyInstance(const ast::KernelDef& kernel) {
  std::vector<TypeArguments> instances{{}};
  for (const ast::TypeParam& param : kernel.typeParams) {
    std::vector<TypeArguments> extended;
    for (const TypeArguments& partial : instances)
      for (const ast::Ident& type : param.bound) {
        std::optional<DType> dtype = parseDType(type.name);
        if (!dtype) continue;  // reported when the kernel is elaborated
        TypeArguments next = partial;
        next[param.name.name] = *dtype;
        extended.push_back(next);
      }
    instances = extended;
  }
  return instances;
}

}  // namespace

std::vector<tensor::Kernel> Frontend::elaborateAll(const ast::Module& module) {
  std::vector<tensor::Kernel> kernels;
  const LoadedModule* loaded = elaborator_->moduleOf(module);
  EMMY_INTERNAL_ASSERT(loaded != nullptr, "elaborateAll of a module this frontend did not load");
  for (const ast::KernelDef& def : module.kernels) {
    if (loaded->kernels.at(def.name.name) != &def) continue;  // a duplicate, already reported
    std::vector<TypeArguments> instances = everyInstance(def);
    if (instances.empty()) instances.push_back({});  // an empty or invalid bound: let elaboration say why
    for (tensor::Kernel& kernel : instantiate(*loaded, def, instances, {})) kernels.push_back(std::move(kernel));
  }
  return kernels;
}

std::vector<tensor::Kernel> Frontend::elaborateSelected(const ast::Module& module, const std::string& selector,
                                                        bool requireTypes) {
  const LoadedModule* loaded = elaborator_->moduleOf(module);
  EMMY_INTERNAL_ASSERT(loaded != nullptr, "elaborateSelected of a module this frontend did not load");
  std::string name = selector;
  std::vector<std::string> typeNames;
  std::vector<std::pair<std::string, std::string>> integerTexts;  // `STRIDE=2`
  if (size_t open = selector.find('<'); open != std::string::npos) {
    if (selector.back() != '>')
      throw UsageError(fmt::format("--kernel '{}': expected NAME or NAME<TYPE, ..., PARAM=VALUE, ...>", selector));
    name = selector.substr(0, open);
    std::string inner = selector.substr(open + 1, selector.size() - open - 2);
    std::stringstream list(inner);
    auto trimmed = [](std::string text) {
      text.erase(0, text.find_first_not_of(" \t"));
      text.erase(text.find_last_not_of(" \t") + 1);
      return text;
    };
    for (std::string item; std::getline(list, item, ',');) {
      if (size_t equals = item.find('='); equals != std::string::npos)
        integerTexts.emplace_back(trimmed(item.substr(0, equals)), trimmed(item.substr(equals + 1)));
      else
        typeNames.push_back(trimmed(item));
    }
  }
  auto found = loaded->kernels.find(name);
  if (found == loaded->kernels.end()) {
    std::vector<std::string> names;
    for (const auto& [kernelName, def] : loaded->kernels) names.push_back(kernelName);
    throw UsageError(withSuggestion(fmt::format("--kernel: no kernel named '{}' in {} (kernels: {})", name,
                                                module.source->path(), join(names, ", ")),
                                    name, names));
  }
  const ast::KernelDef& def = *found->second;
  IntegerArguments integers;
  for (const auto& [param, text] : integerTexts) {
    std::vector<std::string> names;
    for (const ast::IntegerParam& declared : def.integerParams) names.push_back(declared.name.name);
    if (std::find(names.begin(), names.end(), param) == names.end())
      throw UsageError(withSuggestion(fmt::format("--kernel: '{}' has no integer parameter '{}'{}", name, param,
                                                  names.empty() ? "" : " (it has " + join(names, ", ") + ")"),
                                      param, names));
    int64_t value = 0;
    auto [end, status] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || status != std::errc() || end != text.data() + text.size())
      throw UsageError(fmt::format("--kernel: {}={} is not an integer", param, text));
    if (!integers.emplace(param, value).second) throw UsageError(fmt::format("--kernel: {} is given twice", param));
  }
  std::vector<TypeArguments> instances;
  if (typeNames.empty()) {
    if (requireTypes && !def.typeParams.empty())
      throw UsageError(fmt::format("--kernel: '{}' is generic; name its types, e.g. --kernel '{}<{}>'", name, name,
                                   def.typeParams[0].bound.empty() ? "f32" : def.typeParams[0].bound[0].name));
    instances = everyInstance(def);
  } else {
    if (typeNames.size() != def.typeParams.size())
      throw UsageError(fmt::format("--kernel: '{}' has {} type parameter(s) but {} type(s) were given", name,
                                   def.typeParams.size(), typeNames.size()));
    TypeArguments types;
    for (size_t k = 0; k < typeNames.size(); ++k) {
      std::optional<DType> dtype = parseDType(typeNames[k]);
      if (!dtype) throw UsageError(withDTypeSuggestion(fmt::format("--kernel: unknown type '{}'", typeNames[k]), typeNames[k], {}));
      types[def.typeParams[k].name.name] = *dtype;
    }
    instances.push_back(types);
  }
  return instantiate(*loaded, def, instances, integers);
}

std::vector<tensor::Kernel> Frontend::instantiate(const LoadedModule& module, const ast::KernelDef& def,
                                                  const std::vector<TypeArguments>& instances,
                                                  const IntegerArguments& integers) {
  std::vector<tensor::Kernel> kernels;
  for (const TypeArguments& types : instances)
    if (const tensor::Kernel* kernel = elaborator_->instantiate(module, def, types, integers, def.name.loc))
      kernels.push_back(*kernel);
  return kernels;
}

std::vector<fs::path> Elaborator::loadedFiles() const {
  std::vector<fs::path> files;
  std::error_code ignored;
  for (const auto& [key, module] : modules_)
    if (fs::is_regular_file(key, ignored)) files.push_back(key);
  return files;
}

std::vector<fs::path> Frontend::loadedFiles() const { return elaborator_->loadedFiles(); }

fs::path Frontend::defaultStdlibDir() {
  if (const char* fromEnvironment = std::getenv("EMMY_STDLIB")) return fromEnvironment;
  // An installed emmy (PREFIX/bin/emmy) finds the library it was installed with.
  std::error_code ignored;
  fs::path installed = fs::read_symlink("/proc/self/exe", ignored).parent_path().parent_path() / "share" / "emmy" / "stdlib";
  if (!ignored && fs::is_directory(installed, ignored)) return installed;
  return EMMY_STDLIB_DIR;
}

}  // namespace emmy
