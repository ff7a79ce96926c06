#include "tune/isolation.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "support/process.h"

namespace emmy::tune {

namespace {

// The child's answer, as text: the status word, the time, then the message.
void writeMeasurement(const std::filesystem::path& path, const Measurement& measurement) {
  std::ofstream out(path, std::ios::binary);
  out << statusName(measurement.status) << "\n" << fmt::format("{:.17g}", measurement.milliseconds) << "\n"
      << measurement.message;
}

std::optional<Measurement> readMeasurement(const std::filesystem::path& path) {
  std::istringstream in(readWholeFile(path));
  std::string status, time;
  if (!std::getline(in, status) || !std::getline(in, time)) return std::nullopt;
  std::optional<Status> parsed = parseStatus(status);
  if (!parsed) return std::nullopt;
  Measurement measurement{*parsed, std::stod(time), ""};
  std::getline(in, measurement.message, '\0');
  return measurement;
}

// The last lines the child printed, on one line, for a message (a crash's own explanation).
std::string lastLines(const std::string& output) {
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) lines.push_back(line);
  std::string text;
  for (size_t k = lines.size() > 3 ? lines.size() - 3 : 0; k < lines.size(); ++k) text += (text.empty() ? "" : " | ") + lines[k];
  if (text.size() > 400) text = "..." + text.substr(text.size() - 400);
  return text.empty() ? "" : ": " + text;
}

}  // namespace

std::string IsolatedBackend::description() const {
  return fmt::format("{}; each candidate in a process of its own, stopped after {:.1f} s", inner_->description(),
                     static_cast<double>(timeout_.count()) / 1000);
}

Measurement IsolatedBackend::measure(const CandidateProgram& program) {
  inner_->prepare(program);
  TemporaryFolder folder;
  std::filesystem::path result = folder.path() / "measurement";
  ProcessOutcome outcome = runInChild(
      [&] {
        writeMeasurement(result, inner_->measure(program));
        return 0;
      },
      folder.path() / "output.log", timeout_);
  switch (outcome.kind) {
    case ProcessOutcome::Kind::TimedOut:
      return {Status::TimedOut, 0,
              fmt::format("no result after {:.1f} s; the process was killed", static_cast<double>(timeout_.count()) / 1000)};
    case ProcessOutcome::Kind::Signaled:
      return {Status::Crashed, 0,
              fmt::format("killed by signal {} ({}){}", outcome.code, strsignal(outcome.code), lastLines(outcome.output))};
    case ProcessOutcome::Kind::Exited:
      if (outcome.code != 0)
        return {Status::Crashed, 0, fmt::format("the process exited with code {}{}", outcome.code, lastLines(outcome.output))};
      break;
  }
  if (std::optional<Measurement> measurement = readMeasurement(result)) return *measurement;
  return {Status::Crashed, 0, "the process ended without a result" + lastLines(outcome.output)};
}

}  // namespace emmy::tune
