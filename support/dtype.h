// Element types of the language and PyTorch's promotion rules between them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace emmy {

enum class DType : uint8_t { Bool, I8, I32, I64, F16, BF16, F32, F64 };

inline constexpr DType kAllDTypes[] = {DType::Bool, DType::I8,   DType::I32, DType::I64,
                                       DType::F16,  DType::BF16, DType::F32, DType::F64};

std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
int dtypeBytes(DType t);

// The dtype a PyTorch or NumPy spelling names (float32, half, bfloat16, double, int64, long, bool_, f4,
// ...), for "did you mean" messages; nullopt for any other name, Emmy's own included.
std::optional<DType> dtypeOfForeignName(std::string_view name);

// `message` (about an unknown type or function `name`) with "; did you mean 'f32'?" when `name` is a
// PyTorch or NumPy spelling of a dtype, else the closest of `candidates` (support/text.h).
std::string withDTypeSuggestion(std::string message, std::string_view name, const std::vector<std::string>& candidates);

inline bool isFloat(DType t) { return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64; }
inline bool isInteger(DType t) { return t == DType::I8 || t == DType::I32 || t == DType::I64; }

// PyTorch's promotion of two tensor dtypes: f16 with bf16 gives f32, an integer with a float gives the
// float, bool counts as the narrowest integer.
DType promote(DType a, DType b);

// The type reductions and matrix products accumulate in: f32 for f16 and bf16, the type itself otherwise.
DType accumulatorType(DType t);

}  // namespace emmy
