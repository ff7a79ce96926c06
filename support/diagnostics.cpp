#include "support/diagnostics.h"

#include <algorithm>
#include <cstdio>

#include "support/files.h"

namespace emmy {

void Diagnostics::error(const SourceLoc& loc, std::string message, std::vector<Diagnostic> notes) {
  // The instances of a generic kernel share their source: an error they all make is reported once.
  for (const Diagnostic& seen : errors_)
    if (seen.message == message && seen.loc.file == loc.file && seen.loc.line == loc.line &&
        seen.loc.column == loc.column)
      return;
  errors_.push_back({loc, std::move(message), std::move(notes)});
}

namespace {

std::string renderLabelled(const Diagnostic& d, const char* label) {
  if (!d.loc.valid()) return fmt::format("emmy: {}: {}\n", label, d.message);
  std::string out = fmt::format("{}:{}:{}: {}: {}\n", d.loc.file->path(), d.loc.line, d.loc.column, label, d.message);
  std::string_view line = d.loc.file->line(d.loc.line);
  out += fmt::format("{}\n", line);
  // The caret line keeps tabs so that it lines up under the source line.
  std::string caret;
  for (int i = 0; i + 1 < d.loc.column && static_cast<size_t>(i) < line.size(); ++i)
    caret += line[i] == '\t' ? '\t' : ' ';
  int available = std::max<int>(1, static_cast<int>(line.size()) - (d.loc.column - 1));
  caret += '^';
  caret += std::string(std::max(0, std::min(d.loc.length, available) - 1), '~');
  out += caret + "\n";
  return out;
}

}  // namespace

std::string renderDiagnostic(const Diagnostic& d) {
  std::string out = renderLabelled(d, "error");
  for (const Diagnostic& note : d.notes) out += renderLabelled(note, "note");
  return out;
}

std::string Diagnostics::render() const {
  std::string out;
  for (const Diagnostic& d : errors_) out += renderDiagnostic(d);
  return out;
}

int runReportingFailures(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    return kExitUsageError;
  } catch (const FileError& e) {
    fmt::print(stderr, "{}: error: {}\n", program, e.what());
    return kExitUserError;
  } catch (const InternalError& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return kExitInternalError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: internal error (this is a bug in Emmy, please report it): {}\n", program, e.what());
    return kExitInternalError;
  }
}

}  // namespace emmy
