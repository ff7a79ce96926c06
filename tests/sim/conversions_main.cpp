// f16 and bf16 conversions and arithmetic against known bit patterns, and exhaustively against the
// definition of round-to-nearest-even: every finite 16-bit value converts back to itself, the midpoint
// between two neighbours rounds to the even one, and the floats just beside the midpoint round to the
// nearer neighbour. Values are decoded here with ldexp, independently of the simulation header.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "check.h"

extern "C" int narrow(const float* in, __half* halves, __nv_bfloat16* bf16s, int64_t n, cudaStream_t stream);
extern "C" int narrow_double(const double* in, __half* halves, __nv_bfloat16* bf16s, int64_t n, cudaStream_t stream);
extern "C" int widen(const __half* halves, const __nv_bfloat16* bf16s, float* from_half, float* from_bf16, int64_t n,
                     cudaStream_t stream);
extern "C" int arithmetic(unsigned short* bits, cudaStream_t stream);
extern "C" const char* emmy_last_error(void);

namespace {

struct Format {
  const char* name;
  int exponentBits, mantissaBits;
  uint16_t largestFinite;
};
const Format kHalf{"f16", 5, 10, 0x7bff};
const Format kBFloat16{"bf16", 8, 7, 0x7f7f};

// The value of a positive pattern; the pattern just past the largest finite one is 2^(emax+1), which is
// where rounding to infinity happens.
double valueOf(const Format& format, uint32_t bits) {
  const int bias = (1 << (format.exponentBits - 1)) - 1;
  const uint32_t exponent = bits >> format.mantissaBits, mantissa = bits & ((1u << format.mantissaBits) - 1);
  if (exponent == 0) return std::ldexp(static_cast<double>(mantissa), 1 - bias - format.mantissaBits);
  return std::ldexp(static_cast<double>(mantissa | (1u << format.mantissaBits)),
                    static_cast<int>(exponent) - bias - format.mantissaBits);
}

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

std::string text(float value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", value);
  return text;
}

std::string hex(unsigned value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%04x", value);
  return text;
}

// Runs `inputs` through the kernel and returns the bits in the given format.
std::vector<uint16_t> narrowed(Checks& checks, const std::vector<float>& inputs, const Format& format) {
  std::vector<__half> halves(inputs.size());
  std::vector<__nv_bfloat16> bf16s(inputs.size());
  checks.expect(narrow(inputs.data(), halves.data(), bf16s.data(), static_cast<int64_t>(inputs.size()), nullptr) == 0,
                emmy_last_error());
  std::vector<uint16_t> bits(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    bits[i] = &format == &kHalf ? __half_as_ushort(halves[i]) : __bfloat16_as_ushort(bf16s[i]);
  return bits;
}

void checkRoundingExhaustively(Checks& checks, const Format& format) {
  std::vector<float> inputs;
  std::vector<uint16_t> expected;
  for (uint32_t bits = 0; bits <= format.largestFinite; ++bits) {
    const double value = valueOf(format, bits), next = valueOf(format, bits + 1);
    const float midpoint = static_cast<float>((value + next) / 2);  // exact: one bit more than the format
    const uint16_t even = (bits & 1) == 0 ? bits : bits + 1;
    for (float sign : {1.0f, -1.0f}) {
      const uint16_t signBit = sign < 0 ? 0x8000 : 0;
      inputs.insert(inputs.end(), {sign * static_cast<float>(value), sign * midpoint,
                                   sign * std::nextafter(midpoint, 0.0f), sign * std::nextafter(midpoint, INFINITY)});
      expected.insert(expected.end(),
                      {static_cast<uint16_t>(bits | signBit), static_cast<uint16_t>(even | signBit),
                       static_cast<uint16_t>(bits | signBit), static_cast<uint16_t>((bits + 1) | signBit)});
    }
  }
  const std::vector<uint16_t> actual = narrowed(checks, inputs, format);
  int wrong = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    wrong += actual[i] != expected[i];
    checks.expect(actual[i] == expected[i], std::string(format.name) + " of " + text(inputs[i]) + ": " +
                                                hex(actual[i]) + ", expected " + hex(expected[i]));
  }
  std::printf("%s rounding: %zu conversions, %d wrong\n", format.name, inputs.size(), wrong);
}

void checkKnownPatterns(Checks& checks) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    float value;
    uint16_t half, bf16;
  } known[] = {
      {1.0f, 0x3c00, 0x3f80},       {-2.0f, 0xc000, 0xc000},       {65504.0f, 0x7bff, 0x4780},
      {65520.0f, 0x7c00, 0x4780},   {1e-30f, 0x0000, 0x0da2},      {INFINITY, 0x7c00, 0x7f80},
      {-INFINITY, 0xfc00, 0xff80},  {nan, 0x7fff, 0x7fff},         {-nan, 0x7fff, 0x7fff},
      {-0.0f, 0x8000, 0x8000},      {0x1p-24f, 0x0001, 0x3380},    {0x1p-25f, 0x0000, 0x3300},
      {0x1.8p-24f, 0x0002, 0x33c0}, {3.14159265f, 0x4248, 0x4049}, {1.0f / 3.0f, 0x3555, 0x3eab},
  };
  std::vector<float> inputs;
  for (const auto& k : known) inputs.push_back(k.value);
  const std::vector<uint16_t> halves = narrowed(checks, inputs, kHalf), bf16s = narrowed(checks, inputs, kBFloat16);
  for (size_t i = 0; i < inputs.size(); ++i) {
    checks.expect(halves[i] == known[i].half,
                  "f16 of " + text(inputs[i]) + ": " + hex(halves[i]) + ", expected " + hex(known[i].half));
    checks.expect(bf16s[i] == known[i].bf16,
                  "bf16 of " + text(inputs[i]) + ": " + hex(bf16s[i]) + ", expected " + hex(known[i].bf16));
  }
  std::printf("known patterns: %zu checked\n", inputs.size());
}

void checkWidening(Checks& checks) {
  std::vector<__half> halves(65536);
  std::vector<__nv_bfloat16> bf16s(65536);
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    halves[bits] = __ushort_as_half(static_cast<unsigned short>(bits));
    bf16s[bits] = __ushort_as_bfloat16(static_cast<unsigned short>(bits));
  }
  std::vector<float> fromHalf(65536), fromBf16(65536);
  checks.expect(widen(halves.data(), bf16s.data(), fromHalf.data(), fromBf16.data(), 65536, nullptr) == 0,
                emmy_last_error());
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const uint32_t magnitude = bits & 0x7fff;
    const float sign = (bits & 0x8000) != 0 ? -1.0f : 1.0f;
    // CUDA turns every f16 NaN into the canonical float NaN; bf16 widening keeps the bits.
    const uint32_t expectedHalf = magnitude > 0x7c00    ? 0x7fffffffu
                                  : magnitude == 0x7c00 ? bitsOf(sign * INFINITY)
                                                        : bitsOf(sign * static_cast<float>(valueOf(kHalf, magnitude)));
    checks.expect(bitsOf(fromHalf[bits]) == expectedHalf, "f16 " + hex(bits) + " to float");
    checks.expect(bitsOf(fromBf16[bits]) == bits << 16, "bf16 " + hex(bits) + " to float");
  }
  std::printf("widening: all 65536 patterns of each checked\n");
}

// From double, rounding is once, from the double: converting through float first would round twice.
void checkDoubleRounding(Checks& checks) {
  const std::vector<double> inputs = {1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-8 + 0x1p-40};
  std::vector<__half> halves(2);
  std::vector<__nv_bfloat16> bf16s(2);
  checks.expect(narrow_double(inputs.data(), halves.data(), bf16s.data(), 2, nullptr) == 0, emmy_last_error());
  checks.expect(__half_as_ushort(halves[0]) == 0x3c01,
                "f16 of 1 + 2^-11 + 2^-40 from double: " + hex(__half_as_ushort(halves[0])));
  checks.expect(__bfloat16_as_ushort(bf16s[1]) == 0x3f81,
                "bf16 of 1 + 2^-8 + 2^-40 from double: " + hex(__bfloat16_as_ushort(bf16s[1])));
  const std::vector<uint16_t> viaFloat = narrowed(checks, {static_cast<float>(inputs[0])}, kHalf);
  checks.expect(viaFloat[0] == 0x3c00, "f16 of 1 + 2^-11 + 2^-40 through float: " + hex(viaFloat[0]));
}

void checkArithmetic(Checks& checks) {
  const uint16_t expected[12] = {0x3c00, 0x3c02, 0x7c00, 0x3555, 0xc200, 0x3f80,
                                 0x3eab, 1,      0x4300, 0xc000, 0x7c00, 0x4040};
  unsigned short bits[12] = {};
  checks.expect(arithmetic(bits, nullptr) == 0, emmy_last_error());
  for (int i = 0; i < 12; ++i)
    checks.expect(bits[i] == expected[i],
                  "arithmetic result " + std::to_string(i) + ": " + hex(bits[i]) + ", expected " + hex(expected[i]));
  std::printf("arithmetic: 12 results checked\n");
}

}  // namespace

int main() {
  Checks checks;
  checkKnownPatterns(checks);
  checkRoundingExhaustively(checks, kHalf);
  checkRoundingExhaustively(checks, kBFloat16);
  checkWidening(checks);
  checkDoubleRounding(checks);
  checkArithmetic(checks);
  return checks.exitCode();
}
