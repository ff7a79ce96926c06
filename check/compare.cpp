#include "check/compare.h"

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/diagnostics.h"

namespace emmy {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// One element's difference. `excess` ranks mismatches: how many times the allowed difference it is (floats),
// or the difference itself (integers).
struct ElementError {
  bool passes = true;
  double absolute = 0;
  double relative = 0;  // 0 when the reference is 0
  double excess = 0;
};

ElementError floatError(double generated, double reference, double tolerance) {
  if ((std::isnan(generated) && std::isnan(reference)) || generated == reference) return {};  // also equal infinities
  if (!std::isfinite(generated) || !std::isfinite(reference)) return {false, kInfinity, kInfinity, kInfinity};
  double absolute = std::fabs(generated - reference);
  double allowed = tolerance + tolerance * std::fabs(reference);
  return {absolute <= allowed, absolute, reference != 0 ? absolute / std::fabs(reference) : 0, absolute / allowed};
}

ElementError integerError(int64_t generated, int64_t reference) {
  if (generated == reference) return {};
  // The difference as unsigned, so that it neither overflows nor rounds to zero for large i64 values.
  uint64_t difference = generated > reference ? static_cast<uint64_t>(generated) - static_cast<uint64_t>(reference)
                                              : static_cast<uint64_t>(reference) - static_cast<uint64_t>(generated);
  double absolute = static_cast<double>(difference);
  return {false, absolute, reference != 0 ? absolute / std::fabs(static_cast<double>(reference)) : 0, absolute};
}

std::vector<int64_t> multiIndex(int64_t flatIndex, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = flatIndex % shape[d];
    flatIndex /= shape[d];
  }
  return index;
}

}  // namespace

double toleranceFor(DType dtype) {
  switch (dtype) {
    case DType::F16: return 1e-2;
    case DType::BF16: return 2e-2;
    case DType::F32: return 1e-4;
    case DType::F64: return 1e-10;
    case DType::Bool:
    case DType::I8:
    case DType::I32:
    case DType::I64: return 0;
  }
  return 0;
}

DType computedPrecision(const tensor::Kernel& kernel, const std::string& output) {
  const tensor::Stage* outputStage = kernel.findStage(output);
  EMMY_INTERNAL_ASSERT(outputStage, "kernel {} has no stage {}", kernel.instanceName(), output);
  DType precision = outputStage->dtype;
  if (!isFloat(precision)) return precision;
  // A float dtype of lower precision is one with a larger tolerance.
  auto lower = [&](DType dtype) {
    if (isFloat(dtype) && toleranceFor(dtype) > toleranceFor(precision)) precision = dtype;
  };
  std::set<std::string> seen;
  std::function<void(const tensor::Stage&)> visitStage;
  std::function<void(const tensor::Expr&)> visit = [&](const tensor::Expr& expr) {
    if (expr.kind == tensor::ExprKind::Unary || expr.kind == tensor::ExprKind::Binary || expr.kind == tensor::ExprKind::Cast)
      lower(expr.dtype);
    if (const auto* unary = expr.as<tensor::Unary>()) visit(*unary->operand);
    if (const auto* binary = expr.as<tensor::Binary>()) {
      visit(*binary->lhs);
      visit(*binary->rhs);
    }
    if (const auto* select = expr.as<tensor::Select>()) {
      visit(*select->condition);
      visit(*select->ifTrue);
      visit(*select->ifFalse);
    }
    if (const auto* cast = expr.as<tensor::Cast>()) visit(*cast->operand);
    if (const auto* load = expr.as<tensor::Load>()) {
      for (const tensor::ExprPtr& index : load->indices) visit(*index);
      if (const tensor::Stage* stage = kernel.findStage(load->tensor)) visitStage(*stage);
    }
  };
  visitStage = [&](const tensor::Stage& stage) {
    if (!seen.insert(stage.name).second) return;
    lower(stage.dtype);
    if (stage.reduction) lower(stage.reduction->accumulator);
    visit(*stage.body);
  };
  visitStage(*outputStage);
  return precision;
}

OutputComparison compareOutput(const std::string& name, const Buffer& generated, const Buffer& reference,
                               std::optional<DType> precision) {
  EMMY_INTERNAL_ASSERT(generated.dtype() == reference.dtype() && generated.shape() == reference.shape(),
                       "output {} compared with a buffer of another dtype or shape", name);
  OutputComparison comparison;
  comparison.name = name;
  comparison.dtype = reference.dtype();
  comparison.precision = precision.value_or(reference.dtype());
  comparison.shape = reference.shape();
  double tolerance = toleranceFor(comparison.precision);
  double worstExcess = 0;
  for (int64_t k = 0; k < reference.numel(); ++k) {
    Value generatedValue = generated.get(k), referenceValue = reference.get(k);
    ElementError error = isFloat(reference.dtype())
                             ? floatError(generatedValue.f, referenceValue.f, tolerance)
                             : integerError(generatedValue.i, referenceValue.i);
    comparison.maxAbsError = std::max(comparison.maxAbsError, error.absolute);
    comparison.maxRelError = std::max(comparison.maxRelError, error.relative);
    if (error.passes) continue;
    ++comparison.mismatches;
    if (comparison.mismatches == 1 || error.excess > worstExcess) {
      worstExcess = error.excess;
      comparison.worstIndex = k;
      comparison.worstGenerated = generatedValue;
      comparison.worstReference = referenceValue;
    }
  }
  return comparison;
}

std::string formatComparison(const OutputComparison& comparison) {
  int64_t numel = 1;
  for (int64_t extent : comparison.shape) numel *= extent;
  // No element, so no error to speak of (a size was 0).
  if (numel == 0)
    return fmt::format("{}: empty (shape [{}]), nothing to compare: ok", comparison.name, fmt::join(comparison.shape, ", "));
  double tolerance = toleranceFor(comparison.precision);
  std::string toleranceText = tolerance > 0 ? fmt::format("{:.0e}", tolerance) : "exact";
  std::string precisionText = comparison.precision == comparison.dtype
                                  ? std::string(dtypeName(comparison.dtype))
                                  : fmt::format("{} computed in {}", dtypeName(comparison.dtype), dtypeName(comparison.precision));
  std::string line = fmt::format("{}: max abs err {:.1e}, max rel err {:.1e}, tolerance {} ({}): ", comparison.name,
                                 comparison.maxAbsError, comparison.maxRelError, toleranceText, precisionText);
  if (comparison.ok()) return line + "ok";
  return line + fmt::format("FAILED, {} of {} elements differ; worst at [{}]: generated {}, reference {}",
                            comparison.mismatches, numel, fmt::join(multiIndex(comparison.worstIndex, comparison.shape), ", "),
                            comparison.worstGenerated.toString(), comparison.worstReference.toString());
}

}  // namespace emmy
