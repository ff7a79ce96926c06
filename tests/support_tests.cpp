// support/: half and bfloat16 rounding, Value conversions, Buffer storage, dtype rules, text helpers.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <catch2/catch.hpp>

#include "support/diagnostics.h"
#include "support/dtype.h"
#include "support/files.h"
#include "support/half.h"
#include "support/process.h"
#include "support/text.h"
#include "support/value.h"

using namespace emmy;

namespace {
const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

float floatFromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
}  // namespace

TEST_CASE("f16 conversion rounds to nearest even", "[support]") {
  CHECK(floatToHalfBits(1.0f) == 0x3c00);
  CHECK(floatToHalfBits(-2.0f) == 0xc000);
  CHECK(floatToHalfBits(65504.0f) == 0x7bff);  // largest finite
  CHECK(floatToHalfBits(65519.0f) == 0x7bff);
  CHECK(floatToHalfBits(65520.0f) == 0x7c00);  // the tie with 65536 rounds to even, which is infinity
  float ulp = std::ldexp(1.0f, -10);
  CHECK(floatToHalfBits(1 + ulp / 2) == 0x3c00);               // tie, to even
  CHECK(floatToHalfBits(1 + 3 * ulp / 2) == 0x3c02);           // tie, to even
  CHECK(floatToHalfBits(1 + ulp / 2 + ulp / 1024) == 0x3c01);  // above the tie
  CHECK(floatToHalfBits(2 - ulp / 4) == 0x4000);               // carries into the exponent
}

TEST_CASE("f16 conversion handles subnormals, zeros, infinities and NaN", "[support]") {
  float unit = std::ldexp(1.0f, -24);  // smallest subnormal
  CHECK(floatToHalfBits(unit) == 0x0001);
  CHECK(floatToHalfBits(unit / 2) == 0x0000);  // tie with zero, to even
  CHECK(floatToHalfBits(unit * 0.75f) == 0x0001);
  CHECK(floatToHalfBits(unit * 1.5f) == 0x0002);  // tie, to even
  CHECK(floatToHalfBits(unit * 2.5f) == 0x0002);  // tie, to even
  CHECK(floatToHalfBits(-unit) == 0x8001);
  CHECK(floatToHalfBits(std::ldexp(1.0f, -14)) == 0x0400);             // smallest normal
  CHECK(floatToHalfBits(std::ldexp(1.0f, -14) - unit / 2) == 0x0400);  // 1023.5 units, to even
  CHECK(floatToHalfBits(std::ldexp(1.0f, -14) - unit) == 0x03ff);      // largest subnormal
  CHECK(floatToHalfBits(0.0f) == 0x0000);
  CHECK(floatToHalfBits(-0.0f) == 0x8000);
  CHECK(floatToHalfBits(kInf) == 0x7c00);
  CHECK(floatToHalfBits(-kInf) == 0xfc00);
  CHECK(floatToHalfBits(kNaN) == 0x7e00);
  CHECK(floatToHalfBits(-kNaN) == 0xfe00);
  CHECK(floatToHalfBits(1e-30f) == 0x0000);

  CHECK(halfBitsToFloat(0x0001) == unit);
  CHECK(halfBitsToFloat(0x8001) == -unit);
  CHECK(halfBitsToFloat(0x3555) == 0.333251953125f);
  CHECK(halfBitsToFloat(0x7c00) == kInf);
  CHECK(std::isnan(halfBitsToFloat(0x7e00)));
  CHECK(std::signbit(halfBitsToFloat(0x8000)));
}

TEST_CASE("every f16 value converts to float and back unchanged", "[support]") {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    float value = halfBitsToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    REQUIRE(floatToHalfBits(value) == bits);
  }
}

TEST_CASE("bf16 conversion rounds to nearest even and keeps NaN a NaN", "[support]") {
  float ulp = std::ldexp(1.0f, -7);
  CHECK(floatToBFloat16Bits(1.0f) == 0x3f80);
  CHECK(floatToBFloat16Bits(1 + ulp / 2) == 0x3f80);                        // tie, to even
  CHECK(floatToBFloat16Bits(1 + 3 * ulp / 2) == 0x3f82);                    // tie, to even
  CHECK(floatToBFloat16Bits(1 + ulp / 2 + ulp / 4096) == 0x3f81);           // above the tie
  CHECK(floatToBFloat16Bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to infinity
  CHECK(floatToBFloat16Bits(kInf) == 0x7f80);
  CHECK(floatToBFloat16Bits(-kInf) == 0xff80);
  CHECK(floatToBFloat16Bits(-0.0f) == 0x8000);
  CHECK(floatToBFloat16Bits(std::ldexp(1.0f, -130)) == 0x0008);  // subnormal
  CHECK(floatToBFloat16Bits(kNaN) == 0x7fc0);
  // A NaN whose payload lies in the dropped bits would truncate to infinity; it stays a NaN.
  CHECK(std::isnan(bfloat16BitsToFloat(floatToBFloat16Bits(floatFromBits(0x7f800001u)))));
  CHECK(bfloat16BitsToFloat(0x4049) == 3.140625f);
  CHECK(bfloat16BitsToFloat(0x0008) == std::ldexp(1.0f, -130));
}

TEST_CASE("Value rounds floats and wraps integers to their dtype", "[support]") {
  CHECK(Value::ofInt(DType::I8, 200).i == -56);
  CHECK(Value::ofInt(DType::I8, -129).i == 127);
  CHECK(Value::ofInt(DType::I32, int64_t{1} << 31).i == std::numeric_limits<int32_t>::min());
  CHECK(Value::ofInt(DType::I64, std::numeric_limits<int64_t>::min()).i == std::numeric_limits<int64_t>::min());
  CHECK(Value::ofInt(DType::Bool, 5).i == 1);
  CHECK(Value::ofInt(DType::F16, 2049).f == 2048);
  CHECK(Value::ofInt(DType::F32, 16777217).f == 16777216);

  CHECK(Value::ofFloat(DType::F32, 0.1).f == static_cast<double>(0.1f));
  CHECK(Value::ofFloat(DType::F16, 0.1).f == 0.0999755859375);
  CHECK(Value::ofFloat(DType::BF16, 0.1).f == 0.10009765625);
  CHECK(Value::ofFloat(DType::F64, 0.1).f == 0.1);
  CHECK(Value::ofFloat(DType::F16, 1e6).f == std::numeric_limits<double>::infinity());
  CHECK(Value::ofFloat(DType::I32, -3.7).i == -3);
  CHECK(Value::ofFloat(DType::I64, std::nan("")).i == 0);
  CHECK(Value::ofFloat(DType::I64, 1e30).i == std::numeric_limits<int64_t>::max());
  CHECK(Value::ofFloat(DType::I64, -1e30).i == std::numeric_limits<int64_t>::min());
  CHECK(Value::ofFloat(DType::Bool, 0.25).i == 1);
  CHECK(Value::ofFloat(DType::Bool, 0).i == 0);
}

TEST_CASE("Value casts and reads", "[support]") {
  CHECK(Value::ofFloat(DType::F32, 2.5).castTo(DType::I32).i == 2);
  CHECK(Value::ofInt(DType::I64, 300).castTo(DType::I8).i == 44);
  Value half = Value::ofFloat(DType::F32, 0.1).castTo(DType::F16);
  CHECK(half.dtype == DType::F16);
  CHECK(half.f == 0.0999755859375);
  CHECK(Value::ofFloat(DType::F32, std::nan("")).castTo(DType::Bool).i == 1);
  CHECK(Value::ofBool(true).castTo(DType::F32).f == 1);
  CHECK(Value::ofFloat(DType::F32, -2.9).asInt() == -2);
  CHECK(Value::ofInt(DType::I32, -7).asDouble() == -7);
  CHECK(Value::ofFloat(DType::F16, 0.0).asBool() == false);
  CHECK(Value::ofBool(true).toString() == "true");
  CHECK(Value::ofInt(DType::I32, -5).toString() == "-5");
  CHECK(Value::ofFloat(DType::F32, 0.5).toString() == "0.5");
  CHECK(Value::ofFloat(DType::F32, -1e300).toString() == "-inf");
}

TEST_CASE("Buffer stores elements in its dtype", "[support]") {
  Buffer halves(DType::F16, {2, 3});
  CHECK(halves.numel() == 6);
  CHECK(halves.byteSize() == 12);
  CHECK(halves.shape() == std::vector<int64_t>{2, 3});
  CHECK(halves.get(5).f == 0);  // zero-initialised
  halves.set(1, Value::ofFloat(DType::F32, 0.1));
  CHECK(halves.get(1).dtype == DType::F16);
  CHECK(halves.get(1).f == 0.0999755859375);
  uint16_t bits;
  std::memcpy(&bits, static_cast<const uint8_t*>(halves.data()) + 2, sizeof bits);
  CHECK(bits == floatToHalfBits(0.1f));

  Buffer bf16(DType::BF16, {1});
  bf16.set(0, Value::ofFloat(DType::F32, 1.0));
  std::memcpy(&bits, bf16.data(), sizeof bits);
  CHECK(bits == 0x3f80);

  Buffer bytes(DType::I8, {3});
  bytes.set(0, Value::ofInt(DType::I64, 300));
  bytes.set(1, Value::ofFloat(DType::F32, -3.7));
  bytes.set(2, Value::ofInt(DType::I64, -128));
  CHECK(bytes.get(0).i == 44);
  CHECK(bytes.get(1).i == -3);
  CHECK(bytes.get(2).i == -128);

  Buffer flags(DType::Bool, {1});
  flags.set(0, Value::ofInt(DType::I64, 7));
  CHECK(flags.get(0).i == 1);
  CHECK(*static_cast<const uint8_t*>(flags.data()) == 1);

  Buffer wide(DType::I64, {1});
  wide.set(0, Value::ofInt(DType::I64, std::numeric_limits<int64_t>::min()));
  CHECK(wide.get(0).i == std::numeric_limits<int64_t>::min());

  CHECK(Buffer(DType::F32, {0, 5}).numel() == 0);
  CHECK(Buffer(DType::F32, {}).numel() == 1);
  CHECK_THROWS_AS(halves.get(6), InternalError);
  CHECK_THROWS_AS(halves.set(-1, Value::ofFloat(DType::F16, 0)), InternalError);
  CHECK_THROWS_AS(Buffer(DType::F32, {2, -1}), InternalError);
}

TEST_CASE("dtype names and PyTorch's promotion", "[support]") {
  for (DType t : kAllDTypes) CHECK(parseDType(dtypeName(t)) == t);
  CHECK(!parseDType("float"));
  CHECK(promote(DType::F16, DType::BF16) == DType::F32);
  CHECK(promote(DType::F16, DType::F32) == DType::F32);
  CHECK(promote(DType::I64, DType::F16) == DType::F16);
  CHECK(promote(DType::Bool, DType::I8) == DType::I8);
  CHECK(promote(DType::I32, DType::I64) == DType::I64);
  CHECK(accumulatorType(DType::BF16) == DType::F32);
  CHECK(accumulatorType(DType::I32) == DType::I32);
}

TEST_CASE("PyTorch's and NumPy's dtype spellings suggest Emmy's", "[support]") {
  CHECK(dtypeOfForeignName("float32") == DType::F32);
  CHECK(dtypeOfForeignName("float") == DType::F32);
  CHECK(dtypeOfForeignName("half") == DType::F16);
  CHECK(dtypeOfForeignName("bfloat16") == DType::BF16);
  CHECK(dtypeOfForeignName("double") == DType::F64);
  CHECK(dtypeOfForeignName("int64") == DType::I64);
  CHECK(dtypeOfForeignName("long") == DType::I64);
  CHECK(dtypeOfForeignName("int") == DType::I32);
  CHECK(dtypeOfForeignName("int8") == DType::I8);
  CHECK(dtypeOfForeignName("bool_") == DType::Bool);
  for (DType t : kAllDTypes) CHECK(!dtypeOfForeignName(dtypeName(t)));  // Emmy's own are not foreign
  CHECK(!dtypeOfForeignName("x"));
  CHECK(withDTypeSuggestion("unknown type 'float16'", "float16", {"f16", "f32"}) ==
        "unknown type 'float16'; did you mean 'f16'?");
  CHECK(withDTypeSuggestion("unknown type 'f33'", "f33", {"f16", "f32"}) == "unknown type 'f33'; did you mean 'f32'?");
}

TEST_CASE("closestMatch suggests a likely typo and nothing else", "[support]") {
  std::vector<std::string> names = {"softmax", "sigmoid", "layernorm"};
  CHECK(closestMatch("softmx", names) == "softmax");
  CHECK(closestMatch("softmax", names) == "softmax");
  CHECK(closestMatch("xyz", names) == "");
  CHECK(closestMatch("abc", {"abd"}) == "abd");  // a third of three letters is one edit
  CHECK(closestMatch("abc", {"axy"}) == "");
  CHECK(closestMatch("ab", {"ac", "aa"}) == "aa");  // ties go to the alphabetically first
  CHECK(closestMatch("ab", {"aa", "ac"}) == "aa");
  CHECK(closestMatch("x", {}) == "");
  CHECK(closestMatch("spilt", {"split", "tile"}) == "split");  // a swap of neighbours is one edit
  CHECK(closestMatch("epsilon", {"x", "eps"}) == "eps");       // an abbreviation of the name
  CHECK(closestMatch("dim", {"dimension", "axis"}) == "dimension");
  CHECK(closestMatch("ep", {"eps"}) == "eps");                 // one edit
  CHECK(closestMatch("e", {"eps", "yz"}) == "");               // too short to abbreviate
  CHECK(withSuggestion("unknown function softmx", "softmx", names) ==
        "unknown function softmx; did you mean 'softmax'?");
  CHECK(withSuggestion("unknown function xyz", "xyz", names) == "unknown function xyz");
  CHECK(join({"a", "b", "c"}, ", ") == "a, b, c");
  CHECK(join({}, ", ") == "");
}

// support/files.h: a failed write of several files leaves none of them, nor a temporary.
TEST_CASE("writeFilesTogether writes all of the files or none", "[support]") {
  namespace fs = std::filesystem;
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  writeFilesTogether({{folder / "a.cu", "old a"}});
  auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(folder)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  };

  // The second file's folder is missing, then the second file is a full device: a.cu keeps its old bytes.
  CHECK_THROWS_WITH(writeFilesTogether({{folder / "a.cu", "new a"}, {folder / "missing" / "a.h", "h"}}),
                    Catch::Contains("cannot write " + (folder / "missing" / "a.h").string() + ": No such file"));
  CHECK_THROWS_WITH(writeFilesTogether({{folder / "a.cu", "new a"}, {"/dev/full", "h"}}),
                    "cannot write /dev/full: No space left on device");
  CHECK(readWholeFile(folder / "a.cu") == "old a");
  CHECK(entries() == std::vector<std::string>{"a.cu"});

  writeFilesTogether({{folder / "a.cu", "new a"}, {folder / "a.h", ""}});
  CHECK(readWholeFile(folder / "a.cu") == "new a");
  CHECK(entries() == std::vector<std::string>{"a.cu", "a.h"});
}

TEST_CASE("readRegularFile reads only regular files of a bounded size", "[support]") {
  namespace fs = std::filesystem;
  TemporaryFolder scratch;
  writeFilesTogether({{scratch.path() / "small.emmy", "kernel"}});
  std::string whyNot;
  CHECK(readRegularFile(scratch.path() / "small.emmy", 6, whyNot) == "kernel");
  CHECK_FALSE(readRegularFile(scratch.path() / "small.emmy", 5, whyNot));
  CHECK(whyNot == "it is larger than 5 bytes (6 bytes)");
  CHECK_FALSE(readRegularFile(scratch.path(), kMaxSourceFileBytes, whyNot));
  CHECK(whyNot == "it is a directory");
  CHECK_FALSE(readRegularFile("/dev/zero", kMaxSourceFileBytes, whyNot));
  CHECK(whyNot == "it is not a regular file");
  CHECK_FALSE(readRegularFile(scratch.path() / "missing.emmy", kMaxSourceFileBytes, whyNot));
  CHECK(whyNot == "No such file or directory");
}
