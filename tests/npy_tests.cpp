// NumPy .npy files (support/npy.h): round trips, NumPy's exact layout, and every way a file can be wrong.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

#include <catch2/catch.hpp>

#include "support/npy.h"
#include "support/process.h"

using namespace emmy;
namespace fs = std::filesystem;

namespace {

void writeBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::string bytesOf(const Buffer& buffer) {
  return std::string(static_cast<const char*>(buffer.data()), buffer.byteSize());
}

// The prefix of a version 1.0 file whose header (padding and newline included) has `length` bytes.
std::string version1Prefix(uint16_t length) {
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(length & 0xff) + static_cast<char>(length >> 8);
}

// np.save("x.npy", np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)) with NumPy 1.24 and later: the
// dict, 20 spaces of room for the first dimension to grow, padding to 128 bytes, a newline, the data.
const std::string kNumpyFixture =
    version1Prefix(118) + "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(20 + 38, ' ') +
    "\n" + std::string("\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40\x00\x00\xc0\x40", 24);

Buffer f32Matrix() {
  Buffer buffer(DType::F32, {2, 3});
  for (int64_t k = 0; k < 6; ++k) buffer.set(k, Value::ofFloat(DType::F32, k + 1));
  return buffer;
}

// The message of the NpyError that reading `path` as `dtype` throws.
std::string readError(const fs::path& path, DType dtype) {
  try {
    readNpy(path, dtype);
  } catch (const NpyError& error) {
    return error.what();
  }
  FAIL("reading " << path << " did not fail");
  return "";
}

}  // namespace

TEST_CASE("npy round trips every dtype bit for bit", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  for (DType dtype : kAllDTypes) {
    CAPTURE(dtypeName(dtype));
    Buffer original(dtype, {3, 5});
    for (int64_t k = 0; k < original.numel(); ++k)
      original.set(k, isFloat(dtype) ? Value::ofFloat(dtype, (k - 7) * 0.37) : Value::ofInt(dtype, k % 2 ? -k : k));
    fs::path path = folder / "x.npy";
    writeNpy(path, original);
    Buffer read = readNpy(path, dtype);
    CHECK(read.dtype() == dtype);
    CHECK(read.shape() == std::vector<int64_t>{3, 5});
    CHECK(bytesOf(read) == bytesOf(original));
  }
}

TEST_CASE("npy keeps special float values and bf16 bit patterns", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  Buffer original(DType::BF16, {4});
  original.set(0, Value::ofFloat(DType::BF16, std::numeric_limits<double>::infinity()));
  original.set(1, Value::ofFloat(DType::BF16, -0.0));
  original.set(2, Value::ofFloat(DType::BF16, 1.5));
  original.set(3, Value::ofFloat(DType::BF16, std::numeric_limits<double>::quiet_NaN()));
  writeNpy(folder / "b.npy", original);
  std::string file = readWholeFile(folder / "b.npy");
  CHECK(file.find("'descr': '<u2'") != std::string::npos);
  CHECK(file.substr(128) == std::string("\x80\x7f\x00\x80\xc0\x3f\xc0\x7f", 8));
  CHECK(bytesOf(readNpy(folder / "b.npy", DType::BF16)) == bytesOf(original));
}

TEST_CASE("npy writes what NumPy writes, byte for byte", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  writeNpy(folder / "x.npy", f32Matrix());
  CHECK(readWholeFile(folder / "x.npy") == kNumpyFixture);
}

TEST_CASE("npy reads and writes 0-length arrays as NumPy does", "[npy][empty]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  // np.save("x.npy", np.zeros((0, 5), dtype=np.float32)): the header of the fixture's length, no data.
  const std::string file =
      version1Prefix(118) + "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }" + std::string(20 + 38, ' ') + "\n";
  writeBytes(folder / "x.npy", file);
  Buffer read = readNpy(folder / "x.npy", DType::F32);
  CHECK(read.shape() == std::vector<int64_t>{0, 5});
  CHECK(read.numel() == 0);
  writeNpy(folder / "again.npy", read);
  CHECK(readWholeFile(folder / "again.npy") == file);
  writeBytes(folder / "x.npy", file + "1234");
  CHECK_THAT(readError(folder / "x.npy", DType::F32), Catch::Contains("4 bytes follow the data of shape (0, 5)"));
}

TEST_CASE("npy pads every header to a multiple of 64 bytes", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  for (std::vector<int64_t> shape : {std::vector<int64_t>{}, {7}, {1, 2, 3, 4, 5, 6, 7, 8}, {123456789, 0}}) {
    writeNpy(folder / "x.npy", Buffer(DType::I8, shape));
    std::string file = readWholeFile(folder / "x.npy");
    size_t headerLength = static_cast<uint8_t>(file[8]) | static_cast<uint8_t>(file[9]) << 8;
    CAPTURE(file.substr(10, headerLength));
    CHECK((10 + headerLength) % 64 == 0);
    CHECK(file[10 + headerLength - 1] == '\n');
    CHECK(readNpy(folder / "x.npy", DType::I8).shape() == shape);
  }
}

TEST_CASE("npy reads a 0-d array as a scalar", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (), }";
  std::string file = version1Prefix(118) + header + std::string(118 - header.size() - 1, ' ') + "\n" +
                     std::string("\x00\x00\x00\x00\x00\x00\x04\x40", 8);  // 2.5
  writeBytes(folder / "eps.npy", file);
  Buffer read = readNpy(folder / "eps.npy", DType::F64);
  CHECK(read.shape().empty());
  CHECK(read.get(0).f == 2.5);
  writeNpy(folder / "again.npy", read);
  CHECK(readWholeFile(folder / "again.npy") == file);
}

TEST_CASE("npy reads NumPy's fixture, format 2.0, and other spellings of the header", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  writeBytes(folder / "numpy.npy", kNumpyFixture);
  CHECK(bytesOf(readNpy(folder / "numpy.npy", DType::F32)) == bytesOf(f32Matrix()));

  // Version 2.0 has a four-byte header length; keys may come in any order, quoted either way.
  std::string header = "{\"shape\": (2,3,), 'fortran_order': False, 'descr': '<f4'}\n";
  std::string version2 = std::string("\x93NUMPY\x02\x00", 8) + static_cast<char>(header.size()) + std::string(3, '\0') +
                         header + bytesOf(f32Matrix());
  writeBytes(folder / "v2.npy", version2);
  Buffer read = readNpy(folder / "v2.npy", DType::F32);
  CHECK(read.shape() == std::vector<int64_t>{2, 3});
  CHECK(bytesOf(read) == bytesOf(f32Matrix()));
}

TEST_CASE("npy reads any non-zero byte of a bool array as true", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  std::string header = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }";
  writeBytes(folder / "m.npy", version1Prefix(118) + header + std::string(118 - header.size() - 1, ' ') + "\n" +
                                   std::string("\x00\x02\x01", 3));
  CHECK(bytesOf(readNpy(folder / "m.npy", DType::Bool)) == std::string("\x00\x01\x01", 3));
}

TEST_CASE("npy errors name the file and what is wrong", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  fs::path path = folder / "x.npy";
  auto withHeader = [](const std::string& header, const std::string& data = "") {
    return version1Prefix(static_cast<uint16_t>(header.size() + 1)) + header + "\n" + data;
  };

  CHECK_THAT(readError(folder / "missing.npy", DType::F32),
             Catch::Contains("missing.npy: cannot read the file: No such file or directory"));

  writeBytes(path, "PK\x03\x04 a zip file");
  CHECK_THAT(readError(path, DType::F32), Catch::Contains("x.npy: not a .npy file"));

  writeBytes(path, std::string("\x93NUMPY\x03\x00", 8) + std::string(4, '\0'));
  CHECK_THAT(readError(path, DType::F32), Catch::Contains("format version 3.0 is not supported"));

  writeBytes(path, version1Prefix(200) + "{'descr'");
  CHECK_THAT(readError(path, DType::F32), Catch::Contains("the file ends inside the header"));

  writeNpy(path, f32Matrix());
  CHECK(readError(path, DType::F64) == path.string() + ": holds '<f4' (f32) data, but f64 ('<f8') is expected");
  CHECK_THAT(readError(path, DType::BF16), Catch::Contains("holds '<f4' (f32) data, but bf16 ('<u2') is expected"));

  writeBytes(path, withHeader("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", "abcd"));
  CHECK_THAT(readError(path, DType::F32), Catch::Contains("holds '>f4' data, but f32 ('<f4') is expected"));

  writeBytes(path, withHeader("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", bytesOf(f32Matrix())));
  CHECK_THAT(readError(path, DType::F32), Catch::Contains("x.npy: is in Fortran order"));

  writeBytes(path, withHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", "12345678"));
  CHECK_THAT(readError(path, DType::F32),
             Catch::Contains("the data is cut short: shape (2, 3) needs 24 bytes but the file holds 8"));

  writeBytes(path, withHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", "12345678"));
  CHECK_THAT(readError(path, DType::F32), Catch::Contains("4 bytes follow the data of shape (1,)"));

  writeBytes(path, withHeader("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999, 99999999999), }"));
  CHECK_THAT(readError(path, DType::F32), Catch::Contains("the shape in the header is too large"));

  for (const char* header : {"{'descr': '<f4', 'fortran_order': False}", "{'descr': '<f4', 'fortran_order': Maybe, 'shape': ()}",
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}", "['<f4']",
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}"}) {
    CAPTURE(header);
    writeBytes(path, withHeader(header));
    CHECK_THAT(readError(path, DType::F32), Catch::Contains("x.npy: malformed .npy header"));
  }
}

TEST_CASE("npy reports a file that cannot be written", "[npy]") {
  TemporaryFolder scratch;
  const fs::path& folder = scratch.path();
  CHECK_THROWS_WITH(writeNpy(folder / "no-such-folder" / "y.npy", f32Matrix()),
                    Catch::Contains("cannot write") && Catch::Contains("y.npy: No such file or directory"));
}
