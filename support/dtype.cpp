#include "support/dtype.h"

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
