// The CUDA printer: Kernel IR of one .emmy file's kernel instances to NAME.cu and NAME.h.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/kernel/nodes.h"

namespace emmy::cuda {

// The C type of an element or scalar in the generated code (spec section 4): float, __half, int64_t, ...
const char* cudaTypeName(DType dtype);

struct GeneratedCuda {
  std::string baseName;  // NAME: the files are NAME.cu and NAME.h
  std::string source;    // NAME.cu
  std::string header;    // NAME.h
};

// Whether a line of generated CUDA is a kernel's call of the body it shares with its 64-bit twin (the
// profile counts an access at the body's statement, not there).
bool callsSharedBody(std::string_view line);

// `sourceFile` is named in the files' first line.
GeneratedCuda emitCuda(const std::vector<kernel::Program>& programs, const std::string& baseName,
                       const std::string& sourceFile);

}  // namespace emmy::cuda
