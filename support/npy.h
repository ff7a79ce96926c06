// NumPy's .npy files: how `emmy check` takes its inputs (`--inputs DIR`) and gives back the outputs of the
// generated code (`--save DIR`). Format versions 1.0 and 2.0 are read and 1.0 is written; data is
// little-endian and in C order. bf16 has no NumPy dtype, so it travels as its `<u2` bit patterns; a scalar
// is a 0-d array.
#pragma once

#include <filesystem>
#include <string>

#include "support/diagnostics.h"
#include "support/dtype.h"
#include "support/value.h"

namespace emmy {

// A file that cannot be read as the array expected. It is a usage error of the command that was given
// the file (exit code 2), and its message names the file.
class NpyError : public UsageError {
public:
  using UsageError::UsageError;
};

// The dtype string that stands for `dtype` in a .npy header: "<f4", "|b1", "<u2" for bf16.
const char* npyDescr(DType dtype);

// Reads `path`, which must hold an array of `dtype` (the parameter it is given for); throws NpyError
// when the file is missing, is not a .npy file, holds another dtype, is in Fortran order or is cut short.
Buffer readNpy(const std::filesystem::path& path, DType dtype);

// The dtype (`<u2` read as bf16) and shape in the header of `path`; throws NpyError like readNpy.
struct NpyInfo {
  DType dtype;
  std::vector<int64_t> shape;
};
NpyInfo readNpyInfo(const std::filesystem::path& path);

// `buffer` as the bytes of a .npy file of format 1.0.
std::string npyBytes(const Buffer& buffer);

// Writes `buffer` to `path` in format 1.0 (support/files.h's writeFilesTogether: a FileError when the
// file cannot be written, and then no part of it is left).
void writeNpy(const std::filesystem::path& path, const Buffer& buffer);

}  // namespace emmy
