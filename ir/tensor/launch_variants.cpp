#include "ir/tensor/launch_variants.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>

#include "support/diagnostics.h"
#include "support/text.h"

namespace emmy::tensor {

namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();
// Each variant is a kernel of its own in the generated file: more than this many is a schedule no one means
// (and the ranges the cases split the sizes into are at most the square of that).
constexpr size_t kMaxVariants = 16;
constexpr size_t kMaxCells = kMaxVariants * kMaxVariants;

struct Range {
  int64_t least = 0, most = kUnbounded;
};
using Cell = std::vector<Range>;  // one range per tested size

// Where a case's test changes value along its size: the first sizes of new ranges.
std::vector<int64_t> boundariesOf(const SizeCase& sizeCase) {
  int64_t after = sizeCase.bound < kUnbounded ? sizeCase.bound + 1 : sizeCase.bound;
  switch (sizeCase.comparison) {
    case SizeComparison::AtMost:
    case SizeComparison::Greater: return {after};
    case SizeComparison::Less:
    case SizeComparison::AtLeast: return {sizeCase.bound};
    case SizeComparison::Equal:
    case SizeComparison::NotEqual: return {sizeCase.bound, after};
  }
  __builtin_unreachable();
}

ExprPtr conjunction(ExprPtr a, ExprPtr b) {
  if (!a) return b;
  return std::make_shared<Binary>(DType::Bool, BinaryOp::And, a, b);
}

ExprPtr disjunction(ExprPtr a, ExprPtr b) { return a ? std::make_shared<Binary>(DType::Bool, BinaryOp::Or, a, b) : b; }

}  // namespace

std::vector<LaunchVariant> launchVariants(const Kernel& kernel) {
  // The params, in the order they first appear, as declared (two calls of a kernel bring two copies of
  // its params, which test different sizes when the calls do).
  std::vector<std::pair<std::string, std::shared_ptr<const LaunchParam>>> params;
  auto indexOf = [&](const LaunchParam& param) {
    std::string declared = printParam(param);
    return std::find_if(params.begin(), params.end(), [&](const auto& p) { return p.first == declared; }) - params.begin();
  };
  for (const Directive& directive : kernel.schedule)
    for (const Number& factor : directive.factors)
      if (factor.atLaunch && indexOf(*factor.atLaunch) == static_cast<std::ptrdiff_t>(params.size()))
        params.push_back({printParam(*factor.atLaunch), factor.atLaunch});
  if (params.empty()) return {{kernel, nullptr, ""}};
  std::vector<std::string> paramNames;
  for (const auto& [declared, param] : params) paramNames.push_back(param->name);

  // The ranges each tested size splits into, sizes in the kernel's order.
  Diagnostics errors;
  std::map<std::string, std::set<int64_t>> starts;
  for (const auto& [declared, param] : params)
    for (const SizeCase& sizeCase : param->cases) {
      const std::string& size = sizeCase.size.text;
      EMMY_INTERNAL_ASSERT(sizeCase.type.empty(), "param {} of {} still tests a type at launch", param->name,
                           kernel.instanceName());
      if (std::find(kernel.sizes.begin(), kernel.sizes.end(), size) == kernel.sizes.end()) {
        errors.error(sizeCase.size.loc,
                     withSuggestion(fmt::format("param '{}' is chosen by the size '{}', which {} does not have{}", param->name,
                                                size, kernel.instanceName(),
                                                kernel.sizes.empty() ? "" : " (sizes: " + join(kernel.sizes, ", ") + ")"),
                                    size, kernel.sizes));
        continue;
      }
      std::set<int64_t>& sizeStarts = starts[size];
      for (int64_t boundary : boundariesOf(sizeCase))
        if (boundary > 0) sizeStarts.insert(boundary);
    }
  if (errors.hasErrors()) throw CompilationFailed{errors};
  std::vector<std::string> tested;
  std::vector<std::vector<Range>> rangesOf;
  size_t cellCount = 1;
  for (const std::string& size : kernel.sizes) {
    auto found = starts.find(size);
    if (found == starts.end()) continue;
    std::vector<Range> ranges{Range{}};
    for (int64_t start : found->second) {
      ranges.back().most = start - 1;
      ranges.push_back(Range{start, kUnbounded});
    }
    tested.push_back(size);
    rangesOf.push_back(ranges);
    cellCount *= ranges.size();
  }
  auto tooMany = [&](const std::string& what) {
    errors.error(params.begin()->second->cases.front().loc,
                 fmt::format("the params chosen at launch ({}) {}", join(paramNames, ", "), what));
    throw CompilationFailed{errors};
  };
  if (cellCount > kMaxCells) tooMany(fmt::format("split the sizes of {} into {} ranges, more than the {} it may be built for",
                                                 kernel.instanceName(), cellCount, kMaxCells));

  // Each cell's values, cells with the same values grouped (in the order they come first); along one size,
  // adjacent cells with the same values are one range.
  std::vector<std::pair<std::vector<int64_t>, std::vector<Cell>>> groups;
  for (size_t index = 0; index < cellCount; ++index) {
    Cell cell;
    std::map<std::string, int64_t> at;
    size_t rest = index;
    for (size_t s = tested.size(); s-- > 0;) {
      cell.insert(cell.begin(), rangesOf[s][rest % rangesOf[s].size()]);
      rest /= rangesOf[s].size();
    }
    for (size_t s = 0; s < tested.size(); ++s) at[tested[s]] = cell[s].least;
    std::vector<int64_t> values;
    for (const auto& [declared, param] : params) values.push_back(param->valueAt(at));
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == values; });
    if (group == groups.end() && groups.size() == kMaxVariants) tooMany(fmt::format("would build {} in more than {} variants, the most a kernel may have", kernel.instanceName(), kMaxVariants));
    if (group == groups.end()) {
      groups.push_back({values, {cell}});
    } else if (tested.size() == 1 && group->second.back()[0].most + 1 == cell[0].least) {
      group->second.back()[0].most = cell[0].most;
    } else {
      group->second.push_back(cell);
    }
  }

  std::vector<LaunchVariant> variants;
  for (const auto& [values, cells] : groups) {
    LaunchVariant variant{kernel, nullptr, ""};
    std::vector<std::string> parts;
    for (size_t p = 0; p < params.size(); ++p) parts.push_back(fmt::format("{}{}", params[p].second->name, values[p]));
    for (Directive& directive : variant.kernel.schedule)
      for (Number& factor : directive.factors)
        if (factor.atLaunch) factor.value = values[indexOf(*factor.atLaunch)];
    for (size_t s = 0; s < tested.size(); ++s) {
      int64_t most = 0;
      for (const Cell& cell : cells) most = std::max(most, cell[s].most);
      if (most != kUnbounded) variant.kernel.sizeAtMost[tested[s]] = most;
    }
    if (groups.size() > 1) {
      variant.name = variant.kernel.launchVariant = join(parts, "_");
      for (const Cell& cell : cells) {
        ExprPtr inCell;
        for (size_t s = 0; s < tested.size(); ++s) {
          auto size = std::make_shared<SizeVar>(tested[s]);
          if (cell[s].least > 0)
            inCell = conjunction(inCell, std::make_shared<Binary>(DType::Bool, BinaryOp::Ge, size,
                                                                  std::make_shared<IntImm>(DType::I64, cell[s].least)));
          if (cell[s].most != kUnbounded)
            inCell = conjunction(inCell, std::make_shared<Binary>(DType::Bool, BinaryOp::Le, size,
                                                                  std::make_shared<IntImm>(DType::I64, cell[s].most)));
        }
        variant.when = disjunction(variant.when, inCell ? inCell : std::make_shared<BoolImm>(true));
      }
    }
    variants.push_back(std::move(variant));
  }
  return variants;
}

std::optional<int64_t> largestExtent(const Dim& dim, const Kernel& kernel) {
  int64_t extent = dim.factor;
  for (const std::string& size : dim.sizes) {
    auto most = kernel.sizeAtMost.find(size);
    if (most == kernel.sizeAtMost.end() || __builtin_mul_overflow(extent, most->second, &extent)) return std::nullopt;
  }
  return extent;
}

}  // namespace emmy::tensor
