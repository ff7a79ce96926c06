// What a user's name could mean in the generated C++ and CUDA. The language lets every identifier
// without '__' that is not an Emmy keyword name a tensor, size, scalar, index or loop (LANGUAGE.md
// section 1); the CUDA printer spells the ones listed here apart (backend/cuda/emit_cuda.cpp), and
// only a kernel's name, which becomes a C function of the header, is refused.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace emmy {

// Names that mean something in generated code or the headers it includes: C++ keywords and alternative
// tokens, the headers' macros (support/header_macros.inc), the C library's and CUDA's functions, types
// and built-in variables, the names the generated code itself uses (`stream`, `emmy_max`, ...), and every
// name that starts with `cuda`, `CUDA`, `CU`, `NV_`, `emmy_` or `EMMY`. A name with '__' is never listed:
// those are the compiler's own.
bool isReservedInGeneratedCode(std::string_view name);

// Why a kernel may not be called `name` (its host function would be a C function of that name, declared
// beside the C library and CUDA), or nothing.
std::optional<std::string> kernelNameProblem(std::string_view name);

}  // namespace emmy
