#include "support/npy.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "support/files.h"

namespace emmy {

namespace fs = std::filesystem;

// Buffer holds its elements in the host's byte order, and .npy files hold little-endian ones.
static_assert(std::endian::native == std::endian::little, "the .npy reader and writer assume a little-endian host");

namespace {

constexpr std::string_view kMagic = "\x93NUMPY";
constexpr size_t kHeaderAlignment = 64;  // NumPy pads magic + length + header to a multiple of this
constexpr size_t kGrowthDigits = 21;     // NumPy's GROWTH_AXIS_MAX_DIGITS

[[noreturn]] void fail(const fs::path& path, const std::string& message) {
  throw NpyError(fmt::format("{}: {}", path.string(), message));
}

struct Header {
  std::string descr;
  bool fortranOrder = false;
  std::vector<int64_t> shape;
};

// The header is the repr of a Python dict: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }.
class HeaderParser {
public:
  HeaderParser(const fs::path& path, std::string_view text) : path_(path), text_(text) {}

  Header parse() {
    Header header;
    bool seenDescr = false, seenOrder = false, seenShape = false;
    expect('{');
    while (!peekIs('}')) {
      std::string key = parseString();
      expect(':');
      if (key == "descr") {
        header.descr = parseString();
        seenDescr = true;
      } else if (key == "fortran_order") {
        header.fortranOrder = parseBool();
        seenOrder = true;
      } else if (key == "shape") {
        header.shape = parseShape();
        seenShape = true;
      } else {
        malformed(fmt::format("unexpected key '{}'", key));
      }
      if (!peekIs('}')) expect(',');
    }
    expect('}');
    skipSpace();
    if (pos_ != text_.size()) malformed("text after the closing brace");
    if (!seenDescr || !seenOrder || !seenShape) malformed("'descr', 'fortran_order' and 'shape' are required");
    return header;
  }

private:
  [[noreturn]] void malformed(const std::string& why) { fail(path_, "malformed .npy header: " + why); }

  void skipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t')) ++pos_;
  }

  bool peekIs(char c) {
    skipSpace();
    return pos_ < text_.size() && text_[pos_] == c;
  }

  void expect(char c) {
    if (!peekIs(c)) malformed(fmt::format("expected '{}'", c));
    ++pos_;
  }

  std::string parseString() {
    skipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) malformed("expected a string");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) malformed("unterminated string");
    std::string value(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return value;
  }

  bool parseBool() {
    skipSpace();
    for (auto [word, value] : {std::pair{std::string_view("True"), true}, std::pair{std::string_view("False"), false}})
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    malformed("expected True or False");
  }

  // A tuple of non-negative integers: (), (5,), (3, 4).
  std::vector<int64_t> parseShape() {
    std::vector<int64_t> shape;
    expect('(');
    while (!peekIs(')')) {
      if (pos_ >= text_.size() || text_[pos_] < '0' || text_[pos_] > '9') malformed("expected a dimension");
      int64_t dimension = 0;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9')
        if (__builtin_mul_overflow(dimension, 10, &dimension) ||
            __builtin_add_overflow(dimension, text_[pos_++] - '0', &dimension))
          malformed("dimension too large");
      shape.push_back(dimension);
      if (!peekIs(')')) expect(',');
    }
    expect(')');
    return shape;
  }

  const fs::path& path_;
  std::string_view text_;
  size_t pos_ = 0;
};

uint32_t littleEndian(const std::string& bytes, size_t offset, size_t width) {
  uint32_t value = 0;
  for (size_t k = 0; k < width; ++k) value |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[offset + k])) << (8 * k);
  return value;
}

// "'<f8' (f64)" for a descr Emmy knows, else just the descr.
std::string describeDescr(const std::string& descr) {
  for (DType dtype : kAllDTypes)
    if (descr == npyDescr(dtype)) return fmt::format("'{}' ({})", descr, dtypeName(dtype));
  return fmt::format("'{}'", descr);
}

std::string shapeTuple(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

}  // namespace

const char* npyDescr(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "|b1";
    case DType::I8: return "|i1";
    case DType::I32: return "<i4";
    case DType::I64: return "<i8";
    case DType::F16: return "<f2";
    case DType::BF16: return "<u2";
    case DType::F32: return "<f4";
    case DType::F64: return "<f8";
  }
  return "";
}

namespace {

// A whole .npy file, its header parsed.
struct NpyFile {
  std::string bytes;
  Header header;
  size_t dataStart = 0;
};

NpyFile openNpy(const fs::path& path) {
  std::string whyNot;
  // Unbounded: the data is as large as the input tensor, and its size is checked against the header below.
  std::optional<std::string> read = readRegularFile(path, UINT64_MAX, whyNot);
  if (!read) fail(path, "cannot read the file: " + whyNot);
  std::string bytes = std::move(*read);

  if (bytes.size() < kMagic.size() + 2 || std::string_view(bytes).substr(0, kMagic.size()) != kMagic)
    fail(path, "not a .npy file (it does not start with \\x93NUMPY)");
  int major = static_cast<uint8_t>(bytes[6]), minor = static_cast<uint8_t>(bytes[7]);
  if ((major != 1 && major != 2) || minor != 0)
    fail(path, fmt::format(".npy format version {}.{} is not supported (1.0 and 2.0 are)", major, minor));
  size_t lengthWidth = major == 1 ? 2 : 4;
  size_t headerStart = kMagic.size() + 2 + lengthWidth;
  if (bytes.size() < headerStart) fail(path, "the file ends inside the header");
  size_t headerEnd = headerStart + littleEndian(bytes, kMagic.size() + 2, lengthWidth);
  if (bytes.size() < headerEnd) fail(path, "the file ends inside the header");

  Header header = HeaderParser(path, std::string_view(bytes).substr(headerStart, headerEnd - headerStart)).parse();
  return {std::move(bytes), std::move(header), headerEnd};
}

}  // namespace

NpyInfo readNpyInfo(const fs::path& path) {
  NpyFile file = openNpy(path);
  for (DType dtype : {DType::Bool, DType::I8, DType::I32, DType::I64, DType::F16, DType::BF16, DType::F32, DType::F64})
    if (file.header.descr == npyDescr(dtype)) return {dtype, file.header.shape};
  fail(path, fmt::format("holds {} data, which Emmy has no type for", describeDescr(file.header.descr)));
}

Buffer readNpy(const fs::path& path, DType dtype) {
  NpyFile file = openNpy(path);
  const std::string& bytes = file.bytes;
  const Header& header = file.header;
  size_t headerEnd = file.dataStart;
  if (header.descr != npyDescr(dtype))
    fail(path, fmt::format("holds {} data, but {} ('{}') is expected", describeDescr(header.descr), dtypeName(dtype),
                           npyDescr(dtype)));
  if (header.fortranOrder) fail(path, "is in Fortran order; only C order is supported (save it with np.ascontiguousarray)");

  // The data size is checked before the Buffer is allocated, so that a lying header cannot ask for terabytes.
  int64_t dataBytes = dtypeBytes(dtype);
  for (int64_t dimension : header.shape)
    if (__builtin_mul_overflow(dataBytes, dimension, &dataBytes)) fail(path, "the shape in the header is too large");
  size_t available = bytes.size() - headerEnd;
  if (available < static_cast<uint64_t>(dataBytes))
    fail(path, fmt::format("the data is cut short: shape {} needs {} bytes but the file holds {}",
                           shapeTuple(header.shape), dataBytes, available));
  if (available > static_cast<uint64_t>(dataBytes))
    fail(path, fmt::format("{} bytes follow the data of shape {}", available - dataBytes, shapeTuple(header.shape)));

  Buffer buffer(dtype, header.shape);
  if (buffer.byteSize() > 0) std::memcpy(buffer.data(), bytes.data() + headerEnd, buffer.byteSize());
  if (dtype == DType::Bool)  // NumPy reads any non-zero byte as True; the generated code expects 0 or 1
    for (size_t k = 0; k < buffer.byteSize(); ++k) static_cast<uint8_t*>(buffer.data())[k] = bytes[headerEnd + k] != 0;
  return buffer;
}

// Byte for byte what NumPy's np.save writes: the dict, room for the first dimension to grow to
// kGrowthDigits digits, then spaces up to the alignment (a whole block of them when already aligned).
std::string npyBytes(const Buffer& buffer) {
  const std::vector<int64_t>& shape = buffer.shape();
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", npyDescr(buffer.dtype()),
                                   shapeTuple(shape));
  if (!shape.empty()) header.append(kGrowthDigits - fmt::formatted_size("{}", shape[0]), ' ');
  size_t unpadded = kMagic.size() + 2 + 2 + header.size() + 1;  // the header ends with a newline
  header.append(kHeaderAlignment - unpadded % kHeaderAlignment, ' ');
  header += '\n';
  EMMY_INTERNAL_ASSERT(header.size() <= 0xffff, ".npy 1.0 header of {} bytes", header.size());

  std::string bytes(kMagic);
  bytes += {'\x01', '\x00', static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  bytes += header;
  bytes.append(static_cast<const char*>(buffer.data()), buffer.byteSize());
  return bytes;
}

void writeNpy(const fs::path& path, const Buffer& buffer) { writeFilesTogether({{path, npyBytes(buffer)}}); }

}  // namespace emmy
