#include "frontend/schedule.h"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "support/text.h"

namespace emmy {

namespace {

tensor::SizeComparison comparisonOf(const std::string& written) {
  if (written == "<") return tensor::SizeComparison::Less;
  if (written == "<=") return tensor::SizeComparison::AtMost;
  if (written == ">") return tensor::SizeComparison::Greater;
  if (written == ">=") return tensor::SizeComparison::AtLeast;
  if (written == "==") return tensor::SizeComparison::Equal;
  return tensor::SizeComparison::NotEqual;
}

class Resolver {
public:
  Resolver(const ParamValues& defines, const std::vector<std::string>& typeParams, Diagnostics& diagnostics)
      : defines_(defines), typeParams_(typeParams), diagnostics_(diagnostics) {}

  // The param as declared, its candidates empty when the declaration has an error.
  DeclaredParam declare(const ast::ParamDecl& param) {
    const std::string& name = param.name.name;
    if (auto seen = locations_.find(name); seen != locations_.end()) {
      diagnostics_.error(param.name.loc, fmt::format("param '{}' is declared twice (first at {}:{})", name,
                                                     seen->second.line, seen->second.column));
      return {};
    }
    locations_[name] = param.name.loc;
    std::vector<int64_t> candidates;
    bool valid = true;
    for (const ast::Factor& candidate : param.candidates) {
      if (!candidate.value) {
        diagnostics_.error(candidate.loc, fmt::format("the candidates of param '{}' must be numbers, not '{}'", name,
                                                      candidate.param.name));
        valid = false;
      } else {
        candidates.push_back(*candidate.value);
      }
    }
    std::string list = candidateList(candidates);
    std::optional<int64_t> value;
    if (!param.defaultValue.value) {
      diagnostics_.error(param.defaultValue.loc,
                         fmt::format("the default of param '{}' must be a number, not '{}'", name, param.defaultValue.param.name));
      valid = false;
    } else if (valid && !contains(candidates, *param.defaultValue.value)) {
      diagnostics_.error(param.defaultValue.loc, fmt::format("the default {} of param '{}' is not one of its candidates {}",
                                                             *param.defaultValue.value, name, list));
      valid = false;
    } else {
      value = param.defaultValue.value;
    }
    auto launch = std::make_shared<tensor::LaunchParam>(tensor::LaunchParam{name, candidates, {}, value.value_or(0)});
    for (const ast::SizeCaseDecl& written : param.cases) {
      if (!written.value.value) {
        diagnostics_.error(written.value.loc, fmt::format("the default of param '{}' must be a number, not '{}'", name,
                                                          written.value.param.name));
      } else if (valid && !contains(candidates, *written.value.value)) {
        diagnostics_.error(written.value.loc, fmt::format("the default {} of param '{}' is not one of its candidates {}",
                                                          *written.value.value, name, list));
      } else if (valid) {
        tensor::SizeCase sizeCase{tensor::Name{written.size.name, written.size.loc}, comparisonOf(written.comparison),
                                  written.bound.value.value_or(0), *written.value.value, written.loc, ""};
        if (written.bound.value || typeCase(written, name)) {
          if (!written.bound.value) sizeCase.type = written.bound.param.name;
          launch->cases.push_back(sizeCase);
        }
      }
    }
    bool defined = false;
    if (auto given = defines_.find(name); given != defines_.end() && valid) {
      defined = true;
      if (contains(candidates, given->second))
        value = given->second;
      else
        diagnostics_.error(param.name.loc, fmt::format("-D {}={} is not one of the candidates {} of param '{}'", name,
                                                       given->second, list, name));
    }
    if (!value || !valid) return {};
    values_[name] = *value;
    if (!launch->cases.empty() && !defined) atLaunch_[name] = launch;
    return {candidates, *param.defaultValue.value};
  }

  // Whether `V if T == f16` is a test of a type parameter against a type (else an error says why not).
  bool typeCase(const ast::SizeCaseDecl& written, const std::string& param) {
    const std::string& typeParam = written.size.name;
    if (std::find(typeParams_.begin(), typeParams_.end(), typeParam) == typeParams_.end()) {
      diagnostics_.error(written.size.loc,
                         fmt::format("param '{}' compares '{}' with the type {}, and '{}' is not a type parameter of the "
                                     "kernel{}", param, typeParam, written.bound.param.name, typeParam,
                                     typeParams_.empty() ? "" : " (" + join(typeParams_, ", ") + ")"));
      return false;
    }
    if (!parseDType(written.bound.param.name)) {
      diagnostics_.error(written.bound.loc, fmt::format("'{}' is not a type: param '{}' compares the type parameter {} "
                                                        "with a type, as in '{} == f16'",
                                                        written.bound.param.name, param, typeParam, typeParam));
      return false;
    }
    if (written.comparison != "==" && written.comparison != "!=") {
      diagnostics_.error(written.loc, fmt::format("param '{}' compares the type parameter {} with '{}': types are "
                                                  "compared with == or !=", param, typeParam, written.comparison));
      return false;
    }
    return true;
  }

  // The value of a number written in a directive, or nullopt after an error.
  std::optional<tensor::Number> number(const ast::Factor& factor) {
    if (factor.value) return tensor::Number{*factor.value, factor.loc, ""};
    const std::string& name = factor.param.name;
    if (auto launch = atLaunch_.find(name); launch != atLaunch_.end())
      return tensor::Number{values_.at(name), factor.loc, name, launch->second};
    if (auto value = values_.find(name); value != values_.end()) return tensor::Number{value->second, factor.loc, ""};
    if (!locations_.count(name)) {
      std::vector<std::string> known;
      for (const auto& [param, loc] : locations_) known.push_back(param);
      diagnostics_.error(factor.loc,
                         withSuggestion(known.empty() ? fmt::format("unknown param '{}': this schedule declares none", name)
                                                      : fmt::format("unknown param '{}' (params: {})", name, join(known, ", ")),
                                        name, known));
    }
    return std::nullopt;  // a param whose own declaration has an error, already reported
  }

  std::optional<tensor::Directive> directive(const ast::Directive& written) {
    tensor::Directive d;
    d.kind = written.kind;
    d.loc = written.loc;
    d.stage = name(written.stage);
    for (const ast::Ident& axis : written.axes) d.axes.push_back(name(axis));
    for (const ast::Ident& result : written.results) d.results.push_back(name(result));
    d.atStage = name(written.atStage);
    d.atAxis = name(written.atAxis);
    d.atomic = written.atomic;
    bool valid = true;
    for (const ast::Factor& factor : written.factors) {
      std::optional<tensor::Number> value = number(factor);
      if (value) d.factors.push_back(*value);
      valid = valid && value.has_value();
    }
    if (written.kind == tensor::DirectiveKind::Cache) {
      if (written.memory.name == "shared") {
        d.memory = tensor::CacheMemory::Shared;
      } else if (written.memory.name == "registers") {
        d.memory = tensor::CacheMemory::Registers;
      } else {
        diagnostics_.error(written.memory.loc,
                           withSuggestion(fmt::format("a cache lives 'in shared' or 'in registers', not 'in {}'",
                                                      written.memory.name),
                                          written.memory.name, {"shared", "registers"}));
        valid = false;
      }
    }
    if (written.kind == tensor::DirectiveKind::Bind) valid = target(written, d.target) && valid;
    if (!valid) return std::nullopt;
    return d;
  }

private:
  static tensor::Name name(const ast::Ident& ident) { return {ident.name, ident.loc}; }

  static bool contains(const std::vector<int64_t>& list, int64_t value) {
    return std::find(list.begin(), list.end(), value) != list.end();
  }

  static std::string candidateList(const std::vector<int64_t>& candidates) {
    std::vector<std::string> texts;
    for (int64_t candidate : candidates) texts.push_back(std::to_string(candidate));
    return "[" + join(texts, ", ") + "]";
  }

  bool target(const ast::Directive& written, tensor::HardwareIndex& index) {
    const std::string& scope = written.targetScope.name;
    const std::string& dimension = written.targetDim.name;
    SourceLoc loc = written.targetScope.loc;
    loc.length = written.targetDim.loc.column + written.targetDim.loc.length - loc.column;
    if (scope == "block") index.scope = tensor::HardwareScope::Block;
    else if (scope == "thread") index.scope = tensor::HardwareScope::Thread;
    else if (scope == "warp") index.scope = tensor::HardwareScope::Warp;
    else if (scope == "grid") index.scope = tensor::HardwareScope::Grid;
    else {
      diagnostics_.error(written.targetScope.loc,
                         withSuggestion(fmt::format("unknown hardware index '{}.{}': a loop binds to {}", scope,
                                                    dimension, ast::kHardwareIndices),
                                        scope, {"block", "thread", "warp", "grid"}));
      return false;
    }
    bool onlyX = index.scope == tensor::HardwareScope::Warp || index.scope == tensor::HardwareScope::Grid;
    if (dimension.size() != 1 || dimension[0] < 'x' || dimension[0] > 'z' || (onlyX && dimension != "x")) {
      diagnostics_.error(loc, fmt::format("unknown hardware index '{}.{}': {} has {}", scope, dimension, scope,
                                          index.scope == tensor::HardwareScope::Warp   ? "only x (the lanes of a warp)"
                                          : index.scope == tensor::HardwareScope::Grid ? "only x (its threads, in one order)"
                                                                                       : "x, y and z"));
      return false;
    }
    index.dimension = dimension[0] - 'x';
    return true;
  }

  const ParamValues& defines_;
  const std::vector<std::string>& typeParams_;
  Diagnostics& diagnostics_;
  std::map<std::string, SourceLoc> locations_;
  std::map<std::string, int64_t> values_;
  std::map<std::string, std::shared_ptr<const tensor::LaunchParam>> atLaunch_;  // the params chosen at launch
};

}  // namespace

std::vector<tensor::Directive> resolveSchedule(const ast::Schedule& schedule, const ParamValues& defines,
                                               const std::vector<std::string>& typeParams,
                                               std::map<std::string, DeclaredParam>& declared,
                                               Diagnostics& diagnostics) {
  Resolver resolver(defines, typeParams, diagnostics);
  for (const ast::ParamDecl& param : schedule.params) {
    DeclaredParam resolved = resolver.declare(param);
    declared.emplace(param.name.name, std::move(resolved));
  }
  std::vector<tensor::Directive> directives;
  for (const ast::Directive& written : schedule.directives)
    if (std::optional<tensor::Directive> directive = resolver.directive(written)) directives.push_back(*directive);
  return directives;
}

std::vector<tensor::Directive> foldTypeCases(std::vector<tensor::Directive> directives,
                                             const std::map<std::string, DType>& typeArguments) {
  for (tensor::Directive& directive : directives)
    for (tensor::Number& factor : directive.factors) {
      if (!factor.atLaunch) continue;
      auto folded = std::make_shared<tensor::LaunchParam>(*factor.atLaunch);
      folded->cases.clear();
      for (const tensor::SizeCase& sizeCase : factor.atLaunch->cases) {
        if (sizeCase.type.empty()) {
          folded->cases.push_back(sizeCase);
          continue;
        }
        bool same = dtypeName(typeArguments.at(sizeCase.size.text)) == sizeCase.type;
        if (same == (sizeCase.comparison == tensor::SizeComparison::Equal)) {
          folded->otherwise = sizeCase.value;  // the cases after it are never reached
          break;
        }
      }
      factor = folded->cases.empty() ? tensor::Number{folded->otherwise, factor.loc, "", nullptr}
                                     : tensor::Number{folded->otherwise, factor.loc, factor.param, folded};
    }
  return directives;
}

}  // namespace emmy
