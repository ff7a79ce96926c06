// The CUDA printer: Kernel IR of one .emmy file's kernel instances to NAME.cu and NAME.h.
#pragma once

#include <string>
#include <vector>

#include "ir/kernel/nodes.h"

namespace emmy::cuda {

struct GeneratedCuda {
  std::string baseName;  // NAME: the files are NAME.cu and NAME.h
  std::string source;    // NAME.cu
  std::string header;    // NAME.h
};

// `sourceFile` is named in the files' first line.
GeneratedCuda emitCuda(const std::vector<kernel::Program>& programs, const std::string& baseName,
                       const std::string& sourceFile);

}  // namespace emmy::cuda
