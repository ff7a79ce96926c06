// User errors are diagnostics with a source location; internal errors are bugs and say so.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "support/source.h"

namespace emmy {

struct Diagnostic {
  SourceLoc loc;
  std::string message;
  std::vector<Diagnostic> notes;  // places that explain it, printed after it as `note:`
};

// Collects every error of a compilation so that all of them are reported, in the order found.
class Diagnostics {
public:
  void error(const SourceLoc& loc, std::string message, std::vector<Diagnostic> notes = {});
  // An error that has no place in a file (a missing file, a bad command-line value).
  void error(std::string message) { error(SourceLoc{}, std::move(message)); }
  // Every error of `other`, after those reported so far.
  void append(const Diagnostics& other) { errors_.insert(errors_.end(), other.errors_.begin(), other.errors_.end()); }

  bool hasErrors() const { return !errors_.empty(); }
  size_t errorCount() const { return errors_.size(); }
  const std::vector<Diagnostic>& errors() const { return errors_; }

  // Renders every error as `FILE:LINE:COL: error: MESSAGE`, the source line and a caret, then its notes
  // the same way with `note:`.
  std::string render() const;

private:
  std::vector<Diagnostic> errors_;
};

std::string renderDiagnostic(const Diagnostic& diagnostic);

// Thrown to abandon the current unit of work after its errors were reported to Diagnostics.
struct CompilationAborted {};

// Thrown by a lowering pass that found errors in the user's program (a schedule's directives), with
// them; the driver prints them and exits with the user-error code.
struct CompilationFailed {
  Diagnostics diagnostics;
};

// A command-line mistake (exit code 2): a bad option value, an unknown --kernel.
class UsageError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// A broken invariant inside Emmy: never the user's fault.
class InternalError : public std::logic_error {
public:
  explicit InternalError(const std::string& message)
      : std::logic_error("internal error (this is a bug in Emmy, please report it): " + message) {}
};

// The exit codes of Emmy's programs (spec section 6).
constexpr int kExitUserError = 1;
constexpr int kExitUsageError = 2;
constexpr int kExitNoCudaDevice = 3;  // emmy run, bench and tune without a GPU
constexpr int kExitInternalError = 70;

// Runs a program's `body` and reports the failures every program shares: a UsageError as `PROGRAM: error:
// MESSAGE` (exit 2), a FileError (files.h) so with exit 1, an InternalError or any other as a bug (exit 70).
int runReportingFailures(const char* program, const std::function<int()>& body);

#define EMMY_INTERNAL_ASSERT(cond, ...)                                                          \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      throw ::emmy::InternalError(fmt::format("{}:{}: {}: ", __FILE__, __LINE__, #cond) +        \
                                  fmt::format(__VA_ARGS__));                                     \
  } while (false)

}  // namespace emmy
