#include "runtime/torch_gpu.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/process.h"
#include "support/diagnostics.h"

extern char** environ;

namespace emmy::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kScriptName = "torch_stdlib.py";
constexpr int kTorchMissing = 3;  // torch_stdlib.py's status without PyTorch or a device
// The session's socket in the python process (torch_stdlib.py --serve reads and answers there).
constexpr int kSessionChannel = 3;
// Importing torch and initialising CUDA: seconds on a fresh machine.
constexpr std::chrono::seconds kSessionStartTimeout{120};
constexpr std::chrono::seconds kClocksTimeout{10};
// How much of the log of a python3 that failed a message quotes.
constexpr size_t kLogLines = 20;

std::string readWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// The last `count` lines of `text`, after "..." when there were more.
std::string lastLines(const std::string& text, size_t count) {
  size_t start = text.size();
  for (size_t k = 0; k < count; ++k) {
    size_t newline = start == 0 ? std::string::npos : text.rfind('\n', start - 1);
    if (newline == std::string::npos) return text;
    start = newline;
  }
  return "...\n" + text.substr(start + 1);
}

// python3 (or $EMMY_PYTHON) and the script.
std::vector<std::string> pythonScript() {
  const char* python = std::getenv("EMMY_PYTHON");
  return {python && *python ? python : "python3", (defaultRuntimeDir() / kScriptName).string()};
}

nlohmann::ordered_json requestJson(const TorchRequest& request) {
  nlohmann::ordered_json item = {{"kernel", request.kernel}, {"dtype", request.dtype}, {"sizes", request.sizes},
                                 {"scalars", request.scalars}, {"params", request.params}};
  if (request.timing.repetitions > 0) {
    item["mode"] = "bench";
    item["warmup"] = request.timing.warmup;
    item["repetitions"] = request.timing.repetitions;
    item["flush_l2"] = request.timing.flushL2;
    if (request.compileSeconds > 0) item["compile_seconds"] = request.compileSeconds;
  } else {
    item["mode"] = "run";
    item["inputs"] = request.inputsDir;
    item["outputs"] = request.outputsDir;
  }
  return item;
}

void parseTiming(const nlohmann::json& item, TorchTiming& timing) {
  timing.ok = item.value("ok", false);
  timing.error = item.value("error", "");
  timing.medianMilliseconds = item.value("median_ms", 0.0);
  timing.minMilliseconds = item.value("min_ms", 0.0);
  if (item.contains("clocks") && item["clocks"].is_object()) {
    timing.clocks.smMHz = item["clocks"].value("sm_mhz", 0.0);
    timing.clocks.memoryMHz = item["clocks"].value("memory_mhz", 0.0);
  }
}

// One result object of torch_stdlib.py (torch_stdlib.py's docstring lists its fields).
TorchResult parseResult(const nlohmann::json& item) {
  TorchResult result;
  if (!item.is_object()) return result;
  parseTiming(item, result);
  result.sdpaBackend = item.value("sdpa_backend", "");
  if (item.contains("baselines") && item["baselines"].is_array())
    for (const nlohmann::json& each : item["baselines"]) {
      if (!each.is_object()) continue;
      TorchBaseline baseline;
      parseTiming(each, baseline);
      baseline.name = each.value("name", "");
      baseline.skipped = each.contains("skipped");
      if (baseline.skipped) baseline.error = each.value("skipped", "");
      baseline.compileSeconds = each.value("compile_s", 0.0);
      result.baselines.push_back(std::move(baseline));
    }
  return result;
}

TorchResult failedResult(const std::string& why) {
  TorchResult result;
  result.error = why;
  return result;
}

}  // namespace

std::string torchRequestsJson(const std::vector<TorchRequest>& requests) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const TorchRequest& request : requests) list.push_back(requestJson(request));
  return list.dump();
}

TorchBatch parseTorchResults(const std::string& json, size_t expected) {
  TorchBatch batch;
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("results") || !parsed["results"].is_array() ||
      parsed["results"].size() != expected) {
    batch.unavailable = fmt::format("{} wrote no results for the {} request(s)", kScriptName, expected);
    return batch;
  }
  batch.torchVersion = parsed.value("torch", "");
  batch.device = parsed.value("device", "");
  for (const nlohmann::json& item : parsed["results"]) batch.results.push_back(parseResult(item));
  return batch;
}

std::vector<std::string> torchCommand(const fs::path& requests, const fs::path& results) {
  std::vector<std::string> command = pythonScript();
  command.push_back(requests.string());
  command.push_back(results.string());
  return command;
}

TorchBatch runTorch(const std::vector<TorchRequest>& requests, std::chrono::seconds timeout) {
  TorchBatch batch;
  if (requests.empty()) return batch;
  TemporaryFolder folder;
  fs::path requestsPath = folder.path() / "requests.json", resultsPath = folder.path() / "results.json";
  {
    std::ofstream out(requestsPath);
    out << torchRequestsJson(requests);
  }
  ProcessOutcome outcome;
  try {
    outcome = runProcess(torchCommand(requestsPath, resultsPath), folder.path(), folder.path() / "torch.log", timeout);
  } catch (const UsageError& error) {  // no python3
    batch.unavailable = error.what();
    return batch;
  }
  std::string output = trimmed(outcome.output);
  if (outcome.kind == ProcessOutcome::Kind::Exited && outcome.code == kTorchMissing) {
    batch.unavailable = output;
  } else if (outcome.kind == ProcessOutcome::Kind::TimedOut) {
    batch.unavailable = fmt::format("{} did not finish in {} s", kScriptName, timeout.count());
  } else if (outcome.kind != ProcessOutcome::Kind::Exited || outcome.code != 0) {
    batch.unavailable = fmt::format("{} failed ({} {}){}", kScriptName,
                                    outcome.kind == ProcessOutcome::Kind::Exited ? "status" : "signal", outcome.code,
                                    output.empty() ? "" : ": " + output);
  } else {
    batch = parseTorchResults(readWholeFile(resultsPath), requests.size());
  }
  return batch;
}

// The running python3: its process group, our end of the socket, and its log (standard output and error).
struct TorchSession::Process {
  pid_t pid = -1;
  int channel = -1;
  TemporaryFolder folder;
  std::string unread;    // received after the last whole line
  bool greeted = false;  // its first line (torch's version and the device) has come

  fs::path log() const { return folder.path() / "torch.log"; }

  bool send(const std::string& line) {
    std::string text = line + "\n";
    for (size_t sent = 0; sent < text.size();) {
      ssize_t count = ::send(channel, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
      if (count < 0 && errno == EINTR) continue;
      if (count <= 0) return false;
      sent += static_cast<size_t>(count);
    }
    return true;
  }

  // The next line; nullopt when the process closed the socket (it ended) or at `deadline` (`timedOut`).
  std::optional<std::string> receive(std::chrono::steady_clock::time_point deadline, bool& timedOut) {
    timedOut = false;
    while (true) {
      if (size_t end = unread.find('\n'); end != std::string::npos) {
        std::string line = unread.substr(0, end);
        unread.erase(0, end + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        timedOut = true;
        return std::nullopt;
      }
      pollfd ready{channel, POLLIN, 0};
      int polled = poll(&ready, 1, static_cast<int>(std::min<int64_t>(left.count(), INT_MAX)));
      if (polled <= 0) continue;  // a signal, or the deadline: looked at above
      char buffer[1 << 16];
      ssize_t count = recv(channel, buffer, sizeof buffer, 0);
      if (count < 0 && errno == EINTR) continue;
      if (count <= 0) return std::nullopt;
      unread.append(buffer, static_cast<size_t>(count));
    }
  }

  // Kills the process group (python3 and the compilers torch.compile started) and says how python3
  // ended: its exit status when it had ended by itself, else minus the signal.
  int stop() {
    close(channel);
    kill(-pid, SIGKILL);  // a process that has already ended keeps its status
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
};

TorchSession::TorchSession() { start(); }

TorchSession::~TorchSession() {
  if (process_) process_->stop();
}

void TorchSession::start() {
  auto process = std::make_unique<Process>();
  int sockets[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets) != 0) {
    unavailable_ = fmt::format("cannot create a socket for {}: {}", kScriptName, std::strerror(errno));
    return;
  }
  // The child's end becomes its descriptor 3 by dup2, which clears close-on-exec, unless it already is 3.
  if (sockets[1] == kSessionChannel) {
    int moved = fcntl(sockets[1], F_DUPFD_CLOEXEC, kSessionChannel + 1);
    close(sockets[1]);
    sockets[1] = moved;
  }
  SpawnSetup setup;
  std::string logText = process->log().string();
  posix_spawn_file_actions_addopen(&setup.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&setup.actions, STDOUT_FILENO, logText.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&setup.actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_adddup2(&setup.actions, sockets[1], kSessionChannel);
  posix_spawnattr_setflags(&setup.attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&setup.attributes, 0);  // a group of its own, so that stopping it stops its compilers
  std::vector<std::string> argv = pythonScript();
  argv.push_back("--serve");
  std::vector<char*> arguments;
  for (const std::string& argument : argv) arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  int error = posix_spawnp(&process->pid, arguments[0], &setup.actions, &setup.attributes, arguments.data(), environ);
  close(sockets[1]);
  if (error != 0) {
    close(sockets[0]);
    unavailable_ = fmt::format("cannot run {}: {}", argv[0], std::strerror(error));
    return;
  }
  process->channel = sockets[0];
  process_ = std::move(process);
}

std::string TorchSession::end(const std::string& why) {
  int status = process_->stop();
  std::string output = trimmed(readWholeFile(process_->log()));
  bool greeted = process_->greeted;
  process_.reset();
  std::string said = output.empty() ? "" : ": " + lastLines(output, kLogLines);
  // One that had started: the next request starts a fresh one. One that never did: neither would that.
  if (greeted) return why + said;
  unavailable_ = status == kTorchMissing ? output : fmt::format("{} did not start ({}){}", kScriptName, why, said);
  return *unavailable_;
}

const std::optional<std::string>& TorchSession::unavailable() {
  if (!process_ || process_->greeted) return unavailable_;
  bool timedOut = false;
  std::optional<std::string> line = process_->receive(std::chrono::steady_clock::now() + kSessionStartTimeout, timedOut);
  nlohmann::json hello = line ? nlohmann::json::parse(*line, nullptr, false) : nlohmann::json();
  if (!hello.is_object()) {
    end(timedOut ? fmt::format("no answer in {} s", kSessionStartTimeout.count()) : "it ended");
    return unavailable_;
  }
  process_->greeted = true;
  torchVersion_ = hello.value("torch", "");
  device_ = hello.value("device", "");
  return unavailable_;
}

TorchResult TorchSession::exchange(const std::string& request, std::chrono::seconds timeout) {
  if (!process_ && !unavailable_) start();
  if (unavailable()) return failedResult(*unavailable_);
  bool timedOut = false;
  std::optional<std::string> line;
  if (process_->send(request)) line = process_->receive(std::chrono::steady_clock::now() + timeout, timedOut);
  nlohmann::json result = line ? nlohmann::json::parse(*line, nullptr, false) : nlohmann::json();
  if (result.is_object()) return parseResult(result);
  std::string why = timedOut ? fmt::format("PyTorch did not answer within {} s", timeout.count())
                             : fmt::format("{} ended while answering", kScriptName);
  return failedResult(end(why));
}

TorchResult TorchSession::bench(const TorchRequest& request, std::chrono::seconds timeout) {
  EMMY_INTERNAL_ASSERT(request.timing.repetitions > 0, "a PyTorch bench request for {} without timed calls", request.kernel);
  return exchange(requestJson(request).dump(), timeout);
}

TorchTiming TorchSession::copy(int64_t bytes, const Timing& timing, std::chrono::seconds timeout) {
  nlohmann::ordered_json request = {{"mode", "copy"},          {"bytes", bytes}, {"warmup", timing.warmup},
                                    {"repetitions", timing.repetitions}, {"flush_l2", timing.flushL2}};
  return exchange(request.dump(), timeout);
}

TorchClocks TorchSession::clocks() { return exchange(R"({"mode":"clocks"})", kClocksTimeout).clocks; }

}  // namespace emmy::runtime
