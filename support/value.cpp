#include "support/value.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "support/diagnostics.h"
#include "support/half.h"

namespace emmy {

namespace {

double roundToFloatType(DType dtype, double value) {
  switch (dtype) {
    case DType::F16: return halfBitsToFloat(floatToHalfBits(static_cast<float>(value)));
    case DType::BF16: return bfloat16BitsToFloat(floatToBFloat16Bits(static_cast<float>(value)));
    case DType::F32: return static_cast<float>(value);
    default: return value;
  }
}

int64_t wrapToIntegerType(DType dtype, int64_t value) {
  switch (dtype) {
    case DType::Bool: return value != 0 ? 1 : 0;
    case DType::I8: return static_cast<int8_t>(static_cast<uint8_t>(static_cast<uint64_t>(value)));
    case DType::I32: return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(value)));
    default: return value;
  }
}

int64_t truncateToInt64(double value) {
  if (std::isnan(value)) return 0;
  if (value >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (value <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(value);
}

}  // namespace

Value Value::ofFloat(DType dtype, double value) {
  Value v;
  v.dtype = dtype;
  if (isFloat(dtype))
    v.f = roundToFloatType(dtype, value);
  else if (dtype == DType::Bool)
    v.i = value != 0 ? 1 : 0;
  else
    v.i = wrapToIntegerType(dtype, truncateToInt64(value));
  return v;
}

Value Value::ofInt(DType dtype, int64_t value) {
  Value v;
  v.dtype = dtype;
  if (isFloat(dtype))
    v.f = roundToFloatType(dtype, static_cast<double>(value));
  else
    v.i = wrapToIntegerType(dtype, value);
  return v;
}

int64_t Value::asInt() const { return isFloat(dtype) ? truncateToInt64(f) : i; }

Value Value::castTo(DType target) const {
  return isFloat(dtype) ? ofFloat(target, f) : ofInt(target, i);
}

std::string Value::toString() const {
  if (dtype == DType::Bool) return i ? "true" : "false";
  if (isInteger(dtype)) return fmt::format("{}", i);
  return fmt::format("{}", f);
}

Buffer::Buffer(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)), numel_(1) {
  for (int64_t d : shape_) {
    EMMY_INTERNAL_ASSERT(d >= 0, "negative buffer dimension {}", d);
    numel_ *= d;
  }
  bytes_.assign(static_cast<size_t>(numel_) * dtypeBytes(dtype_), 0);
}

Value Buffer::get(int64_t index) const {
  EMMY_INTERNAL_ASSERT(index >= 0 && index < numel_, "buffer index {} out of {}", index, numel_);
  const uint8_t* p = bytes_.data() + index * dtypeBytes(dtype_);
  auto load = [p](auto zero) {
    decltype(zero) x;
    std::memcpy(&x, p, sizeof x);
    return x;
  };
  switch (dtype_) {
    case DType::Bool: return Value::ofInt(dtype_, load(uint8_t{}));
    case DType::I8: return Value::ofInt(dtype_, load(int8_t{}));
    case DType::I32: return Value::ofInt(dtype_, load(int32_t{}));
    case DType::I64: return Value::ofInt(dtype_, load(int64_t{}));
    case DType::F16: return Value::ofFloat(dtype_, halfBitsToFloat(load(uint16_t{})));
    case DType::BF16: return Value::ofFloat(dtype_, bfloat16BitsToFloat(load(uint16_t{})));
    case DType::F32: return Value::ofFloat(dtype_, load(float{}));
    case DType::F64: return Value::ofFloat(dtype_, load(double{}));
  }
  return {};
}

void Buffer::set(int64_t index, const Value& value) {
  EMMY_INTERNAL_ASSERT(index >= 0 && index < numel_, "buffer index {} out of {}", index, numel_);
  uint8_t* p = bytes_.data() + index * dtypeBytes(dtype_);
  Value v = value.castTo(dtype_);
  auto store = [p](auto x) { std::memcpy(p, &x, sizeof x); };
  switch (dtype_) {
    case DType::Bool: store(static_cast<uint8_t>(v.i)); break;
    case DType::I8: store(static_cast<int8_t>(v.i)); break;
    case DType::I32: store(static_cast<int32_t>(v.i)); break;
    case DType::I64: store(static_cast<int64_t>(v.i)); break;
    case DType::F16: store(floatToHalfBits(static_cast<float>(v.f))); break;
    case DType::BF16: store(floatToBFloat16Bits(static_cast<float>(v.f))); break;
    case DType::F32: store(static_cast<float>(v.f)); break;
    case DType::F64: store(v.f); break;
  }
}

}  // namespace emmy
