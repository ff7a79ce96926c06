#include "runtime/torch_gpu.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "support/process.h"
#include "support/diagnostics.h"

namespace emmy::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kScriptName = "torch_stdlib.py";
constexpr int kTorchMissing = 3;  // torch_stdlib.py's status without PyTorch or a device

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

}  // namespace

std::string torchRequestsJson(const std::vector<TorchRequest>& requests) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const TorchRequest& request : requests) {
    nlohmann::ordered_json item = {{"kernel", request.kernel}, {"dtype", request.dtype}, {"sizes", request.sizes},
                                   {"scalars", request.scalars}};
    if (request.timing.repetitions > 0) {
      item["mode"] = "bench";
      item["warmup"] = request.timing.warmup;
      item["repetitions"] = request.timing.repetitions;
      item["flush_l2"] = request.timing.flushL2;
    } else {
      item["mode"] = "run";
      item["inputs"] = request.inputsDir;
      item["outputs"] = request.outputsDir;
    }
    list.push_back(std::move(item));
  }
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
  for (const nlohmann::json& item : parsed["results"]) {
    TorchResult result;
    result.ok = item.is_object() && item.value("ok", false);
    if (item.is_object()) {
      result.error = item.value("error", "");
      result.medianMilliseconds = item.value("median_ms", 0.0);
      result.minMilliseconds = item.value("min_ms", 0.0);
    }
    batch.results.push_back(std::move(result));
  }
  return batch;
}

std::vector<std::string> torchCommand(const fs::path& requests, const fs::path& results) {
  const char* python = std::getenv("EMMY_PYTHON");
  return {python && *python ? python : "python3", (defaultRuntimeDir() / kScriptName).string(), requests.string(),
          results.string()};
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

}  // namespace emmy::runtime
