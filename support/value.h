// Scalars and dense tensors of any element type, as the reference evaluator and the tests hold them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/dtype.h"

namespace emmy {

// One element. Floats keep their value in `f`, already rounded to their type; integers and bool keep
// theirs in `i`, already wrapped to their width (bool is 0 or 1).
struct Value {
  DType dtype = DType::F32;
  double f = 0;
  int64_t i = 0;

  static Value ofFloat(DType dtype, double value);   // rounds to dtype (or converts, for an integer dtype)
  static Value ofInt(DType dtype, int64_t value);    // wraps to dtype (or converts, for a float dtype)
  static Value ofBool(bool value) { return ofInt(DType::Bool, value ? 1 : 0); }

  double asDouble() const { return isFloat(dtype) ? f : static_cast<double>(i); }
  int64_t asInt() const;  // floats truncate toward zero; NaN gives 0; out of range saturates
  bool asBool() const { return isFloat(dtype) ? f != 0 : i != 0; }
  Value castTo(DType target) const;

  std::string toString() const;
};

// A dense row-major tensor.
class Buffer {
public:
  Buffer() = default;
  Buffer(DType dtype, std::vector<int64_t> shape);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  size_t byteSize() const { return bytes_.size(); }

  Value get(int64_t flatIndex) const;
  void set(int64_t flatIndex, const Value& value);  // converts value to the buffer's dtype

private:
  DType dtype_ = DType::F32;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  std::vector<uint8_t> bytes_;
};

}  // namespace emmy
