#include "support/source.h"

namespace emmy {

SourceFile::SourceFile(std::string displayPath, std::string text)
    : path_(std::move(displayPath)), text_(std::move(text)) {
  lineStarts_.push_back(0);
  for (size_t i = 0; i < text_.size(); ++i)
    if (text_[i] == '\n') lineStarts_.push_back(i + 1);
}

std::string_view SourceFile::line(int line) const {
  if (line < 1 || static_cast<size_t>(line) > lineStarts_.size()) return {};
  size_t begin = lineStarts_[line - 1];
  size_t end = static_cast<size_t>(line) < lineStarts_.size() ? lineStarts_[line] - 1 : text_.size();
  std::string_view view(text_.data() + begin, end - begin);
  if (!view.empty() && view.back() == '\r') view.remove_suffix(1);
  return view;
}

}  // namespace emmy
