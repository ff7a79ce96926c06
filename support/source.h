// Source files and locations: every user-facing error points into one of these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace emmy {

// The text of one input file, kept alive by every location that points into it.
class SourceFile {
public:
  SourceFile(std::string displayPath, std::string text);

  const std::string& path() const { return path_; }
  const std::string& text() const { return text_; }
  // The 1-based line `line` without its line terminator; empty when out of range.
  std::string_view line(int line) const;

private:
  std::string path_;
  std::string text_;
  std::vector<size_t> lineStarts_;
};

// A range within a source file. `line` and `column` are 1-based; `length` is at least 1 when valid.
struct SourceLoc {
  std::shared_ptr<const SourceFile> file;
  int line = 0;
  int column = 0;
  int length = 1;

  bool valid() const { return file != nullptr && line > 0; }
};

}  // namespace emmy
