#include "support/dtype.h"

#include <utility>

#include "support/text.h"

namespace emmy {

std::string_view dtypeName(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::I8: return "i8";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F64: return "f64";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
  for (DType t : kAllDTypes)
    if (dtypeName(t) == name) return t;
  return std::nullopt;
}

std::optional<DType> dtypeOfForeignName(std::string_view name) {
  static constexpr std::pair<std::string_view, DType> kSpellings[] = {
      {"float32", DType::F32}, {"float", DType::F32},     {"single", DType::F32},  {"fp32", DType::F32},
      {"f4", DType::F32},      {"float16", DType::F16},   {"half", DType::F16},    {"fp16", DType::F16},
      {"f2", DType::F16},      {"bfloat16", DType::BF16}, {"bfloat", DType::BF16}, {"float64", DType::F64},
      {"double", DType::F64},  {"fp64", DType::F64},      {"f8", DType::F64},      {"float_", DType::F64},
      {"int8", DType::I8},     {"int32", DType::I32},     {"int", DType::I32},     {"i4", DType::I32},
      {"int64", DType::I64},   {"long", DType::I64},      {"int_", DType::I64},    {"bool_", DType::Bool},
      {"boolean", DType::Bool}};
  for (const auto& [spelling, dtype] : kSpellings)
    if (spelling == name) return dtype;
  return std::nullopt;
}

std::string withDTypeSuggestion(std::string message, std::string_view name, const std::vector<std::string>& candidates) {
  if (std::optional<DType> dtype = dtypeOfForeignName(name))
    return message + "; did you mean '" + std::string(dtypeName(*dtype)) + "'?";
  return withSuggestion(std::move(message), name, candidates);
}

int dtypeBytes(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::I8: return 1;
    case DType::F16:
    case DType::BF16: return 2;
    case DType::I32:
    case DType::F32: return 4;
    case DType::I64:
    case DType::F64: return 8;
  }
  return 0;
}

namespace {
// Rank within a category; a wider type wins.
int integerRank(DType t) {
  switch (t) {
    case DType::Bool: return 0;
    case DType::I8: return 1;
    case DType::I32: return 2;
    default: return 3;
  }
}
}  // namespace

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (isFloat(a) && isFloat(b)) {
    if (a == DType::F64 || b == DType::F64) return DType::F64;
    return DType::F32;  // f16+bf16, f16+f32, bf16+f32
  }
  if (isFloat(a)) return a;
  if (isFloat(b)) return b;
  return integerRank(a) >= integerRank(b) ? a : b;
}

DType accumulatorType(DType t) {
  return (t == DType::F16 || t == DType::BF16) ? DType::F32 : t;
}

}  // namespace emmy
