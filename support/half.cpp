#include "support/half.h"

#include <cmath>
#include <cstring>

namespace emmy {

namespace {
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
}  // namespace

uint16_t floatToHalfBits(float value) {
  uint32_t x = bitsOf(value);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t absBits = x & 0x7fffffffu;
  if (absBits >= 0x7f800000u)  // inf or nan
    return sign | (absBits > 0x7f800000u ? 0x7e00u : 0x7c00u);
  if (absBits >= 0x477ff000u) return sign | 0x7c00u;  // rounds to inf (>= 65520)
  if (absBits < 0x38800000u) {                         // subnormal or zero in half
    // Scale into the subnormal range so the FPU does the rounding to nearest even.
    float scaled = floatOf(absBits) * 16777216.0f;  // 2^24: half subnormal unit becomes 1
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  uint32_t mantissa = absBits & 0x007fffffu;
  uint32_t exponent = (absBits >> 23) - 127 + 15;
  uint32_t half = (exponent << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;  // carries into the exponent correctly
  return sign | static_cast<uint16_t>(half);
}

float halfBitsToFloat(uint16_t bits) {
  uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  uint32_t exponent = (bits >> 10) & 0x1fu;
  uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0) {
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return floatOf(sign | 0x7f800000u | (mantissa << 13));
  return floatOf(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

uint16_t floatToBFloat16Bits(float value) {
  uint32_t x = bitsOf(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  uint32_t roundingBias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + roundingBias) >> 16);
}

float bfloat16BitsToFloat(uint16_t bits) { return floatOf(static_cast<uint32_t>(bits) << 16); }

}  // namespace emmy
