#include "ir/tensor/schedule.h"

#include <fmt/format.h>

#include "support/text.h"

namespace emmy::tensor {

const char* directiveWord(DirectiveKind kind) {
  switch (kind) {
#define EMMY_CASE(Kind, word) \
  case DirectiveKind::Kind: return word;
    EMMY_DIRECTIVE_KINDS(EMMY_CASE)
#undef EMMY_CASE
  }
  __builtin_unreachable();
}

std::string hardwareIndexName(HardwareIndex index) {
  const char* scope = index.scope == HardwareScope::Block    ? "block"
                      : index.scope == HardwareScope::Thread ? "thread"
                      : index.scope == HardwareScope::Warp   ? "warp"
                                                             : "grid";
  return fmt::format("{}.{}", scope, "xyz"[index.dimension]);
}

namespace {

std::string names(const std::vector<Name>& list) {
  std::vector<std::string> texts;
  for (const Name& name : list) texts.push_back(name.text);
  return join(texts, ", ");
}

std::string numberText(const Number& number) { return number.param.empty() ? std::to_string(number.value) : number.param; }

std::string numbers(const std::vector<Number>& list) {
  std::vector<std::string> texts;
  for (const Number& number : list) texts.push_back(numberText(number));
  return join(texts, ", ");
}

}  // namespace

std::string printDirective(const Directive& d) {
  const std::string& stage = d.stage.text;
  switch (d.kind) {
    case DirectiveKind::Split:
      return fmt::format("split {}.{} by {} -> ({})", stage, d.axes[0].text, numberText(d.factors[0]), names(d.results));
    case DirectiveKind::Tile:
      return fmt::format("tile {} ({}) by ({}) -> ({})", stage, names(d.axes), numbers(d.factors), names(d.results));
    case DirectiveKind::Reorder: return fmt::format("reorder {} ({})", stage, names(d.axes));
    case DirectiveKind::Fuse: return fmt::format("fuse {} ({}) -> {}", stage, names(d.axes), d.results[0].text);
    case DirectiveKind::Bind:
      return fmt::format("bind {}.{} to {}{}", stage, d.axes[0].text, hardwareIndexName(d.target), d.atomic ? " atomic" : "");
    case DirectiveKind::Inline: return "inline " + stage;
    case DirectiveKind::Root: return "root " + stage;
    case DirectiveKind::DoubleBuffer: return "double_buffer " + stage;
    case DirectiveKind::ComputeAt: return fmt::format("compute {} at {}.{}", stage, d.atStage.text, d.atAxis.text);
    case DirectiveKind::Cache:
      return fmt::format("cache {} in {} at {}.{}{}", stage, d.memory == CacheMemory::Shared ? "shared" : "registers",
                         d.atStage.text, d.atAxis.text, d.results.empty() ? "" : " -> " + d.results[0].text);
    case DirectiveKind::Vectorize:
      return fmt::format("vectorize {}.{}{}", stage, d.axes[0].text, d.factors.empty() ? "" : " by " + numberText(d.factors[0]));
    case DirectiveKind::Unroll: return fmt::format("unroll {}.{}", stage, d.axes[0].text);
    case DirectiveKind::Pad: return fmt::format("pad {} by {}", stage, numberText(d.factors[0]));
    case DirectiveKind::Threads: return fmt::format("threads {} {}", stage, numberText(d.factors[0]));
    case DirectiveKind::IndexBits: return fmt::format("index_bits {} {}", stage, numberText(d.factors[0]));
    case DirectiveKind::Mma:
      return fmt::format("mma {} ({}) by ({}, {}) stages {}", stage, names(d.axes), numberText(d.factors[0]),
                         numberText(d.factors[1]), numberText(d.factors[2]));
    case DirectiveKind::Scan:
      return fmt::format("scan {}.{} by ({}, {})", stage, d.axes[0].text, numberText(d.factors[0]), numberText(d.factors[1]));
  }
  __builtin_unreachable();
}

std::string printParam(const ScheduleParam& param) {
  std::vector<std::string> candidates;
  for (int64_t candidate : param.candidates) candidates.push_back(std::to_string(candidate));
  return fmt::format("param {} in [{}] = {}", param.name, join(candidates, ", "), param.defaultValue);
}

bool SizeCase::holds(int64_t size) const {
  switch (comparison) {
    case SizeComparison::Less: return size < bound;
    case SizeComparison::AtMost: return size <= bound;
    case SizeComparison::Greater: return size > bound;
    case SizeComparison::AtLeast: return size >= bound;
    case SizeComparison::Equal: return size == bound;
    case SizeComparison::NotEqual: return size != bound;
  }
  __builtin_unreachable();
}

int64_t LaunchParam::valueAt(const std::map<std::string, int64_t>& sizes) const {
  for (const SizeCase& sizeCase : cases)
    if (sizeCase.holds(sizes.at(sizeCase.size.text))) return sizeCase.value;
  return otherwise;
}

std::string printParam(const LaunchParam& param) {
  std::vector<std::string> candidates;
  for (int64_t candidate : param.candidates) candidates.push_back(std::to_string(candidate));
  std::string text = fmt::format("param {} in [{}] =", param.name, join(candidates, ", "));
  for (const SizeCase& sizeCase : param.cases) {
    const char* comparison = sizeCase.comparison == SizeComparison::Less      ? "<"
                             : sizeCase.comparison == SizeComparison::AtMost  ? "<="
                             : sizeCase.comparison == SizeComparison::Greater ? ">"
                             : sizeCase.comparison == SizeComparison::AtLeast ? ">="
                             : sizeCase.comparison == SizeComparison::Equal   ? "=="
                                                                              : "!=";
    text += fmt::format(" {} if {} {} {} else", sizeCase.value, sizeCase.size.text, comparison,
                        sizeCase.type.empty() ? std::to_string(sizeCase.bound) : sizeCase.type);
  }
  return text + fmt::format(" {}", param.otherwise);
}

std::string defaultCacheName(const std::string& source, CacheMemory memory,
                             const std::function<bool(const std::string&)>& taken) {
  std::string base = source + (memory == CacheMemory::Shared ? "_shared" : "_local");
  std::string name = base;
  for (int k = 1; taken(name); ++k) name = fmt::format("{}_{}", base, k);
  return name;
}

}  // namespace emmy::tensor
