#include "backend/harness.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include "backend/cuda/emit_cuda.h"
#include "support/diagnostics.h"
#include "support/process.h"

namespace emmy::harness {

namespace fs = std::filesystem;

namespace {

constexpr const char* kArgumentsName = "arguments.bin";

std::string binName(const std::string& parameter) { return parameter + ".bin"; }

void writeFile(const fs::path& path, const void* data, size_t bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
  out.close();
  if (!out) throw UsageError(fmt::format("cannot write {}", path.string()));
}

}  // namespace

HarnessCall harnessCall(const tensor::Kernel& kernel) {
  EMMY_INTERNAL_ASSERT(!kernel.outputs.empty(), "kernel {} has no outputs", kernel.instanceName());
  size_t argumentCount = kernel.inputs.size() + kernel.outputs.size() + kernel.sizes.size();
  HarnessCall result;
  result.declarations = fmt::format(
      "  const int64_t* emmy_harness_arguments = static_cast<const int64_t*>(emmy_harness_read_host(\"{}\", {} * "
      "sizeof(int64_t)));\n",
      kArgumentsName, argumentCount);
  std::string arguments;
  size_t slot = 0;
  auto addArgument = [&](const std::string& text) { arguments += (arguments.empty() ? "" : ", ") + text; };
  for (const tensor::TensorParam& input : kernel.inputs) {
    result.declarations +=
        fmt::format("  const {0}* in__{1} = static_cast<const {0}*>(emmy_harness_read(\"{2}\", emmy_harness_arguments[{3}]));\n",
                    cuda::cudaTypeName(input.dtype), input.name, binName(input.name), slot++);
    addArgument("in__" + input.name);
  }
  for (const tensor::TensorParam& output : kernel.outputs) {
    result.declarations += fmt::format(
        "  {0}* out__{1} = static_cast<{0}*>(emmy_harness_allocate(emmy_harness_arguments[{2}], 0x{3:x}));\n",
        cuda::cudaTypeName(output.dtype), output.name, slot, kPoisonByte);
    result.writes += fmt::format("  emmy_harness_write(\"{}\", out__{}, emmy_harness_arguments[{}]);\n",
                                 binName(output.name), output.name, slot++);
    addArgument("out__" + output.name);
  }
  for (const tensor::ScalarParamDecl& scalar : kernel.scalars) {
    result.declarations += fmt::format(
        "  {0} scalar__{1};\n  std::memcpy(&scalar__{1}, emmy_harness_read_host(\"{2}\", sizeof scalar__{1}), sizeof "
        "scalar__{1});\n",
        cuda::cudaTypeName(scalar.dtype), scalar.name, binName(scalar.name));
    addArgument("scalar__" + scalar.name);
  }
  for (const std::string& size : kernel.sizes)
    addArgument(fmt::format("emmy_harness_arguments[{}] /* {} */", slot++, size));
  addArgument("emmy_harness_stream");
  result.call = fmt::format("{}({})", kernel.instanceName(), arguments);
  return result;
}

namespace {

// The files of one run, in `folder`: arguments.bin holds, as int64_t, the byte size of every input, then
// of every output, then every size of the kernel; each input and scalar is NAME.bin, byte for byte.
// Returns the outputs, in their shapes, for readOutputs.
std::map<std::string, Buffer> writeInputs(const tensor::Kernel& kernel, const tensor::EvaluationInputs& inputs,
                                          const fs::path& folder) {
  std::map<std::string, int64_t> sizes = tensor::bindSizes(kernel, inputs.tensors, inputs.sizes);
  std::map<std::string, Value> scalars = tensor::bindScalars(kernel, inputs.scalars);
  std::vector<int64_t> arguments;
  for (const tensor::TensorParam& input : kernel.inputs) {
    const Buffer& buffer = inputs.tensors.at(input.name);
    writeFile(folder / binName(input.name), buffer.data(), buffer.byteSize());
    arguments.push_back(static_cast<int64_t>(buffer.byteSize()));
  }
  std::map<std::string, Buffer> outputs;
  for (const tensor::TensorParam& output : kernel.outputs) {
    std::vector<int64_t> shape;
    for (const tensor::Dim& dim : output.shape) shape.push_back(tensor::evaluateDim(dim, sizes));
    const Buffer& buffer = outputs.emplace(output.name, Buffer(output.dtype, shape)).first->second;
    arguments.push_back(static_cast<int64_t>(buffer.byteSize()));
  }
  for (const std::string& size : kernel.sizes) arguments.push_back(sizes.at(size));
  writeFile(folder / kArgumentsName, arguments.data(), arguments.size() * sizeof(int64_t));
  for (const tensor::ScalarParamDecl& scalar : kernel.scalars) {
    Buffer value(scalar.dtype, {});
    value.set(0, scalars.at(scalar.name));
    writeFile(folder / binName(scalar.name), value.data(), value.byteSize());
  }
  return outputs;
}

// Reads every NAME.bin output back. A bool output must hold 0 or 1; anything else (often the poison byte:
// never written) is the failure returned.
std::optional<std::string> readOutputs(const fs::path& folder, std::map<std::string, Buffer>& outputs) {
  for (auto& [name, buffer] : outputs) {
    fs::path path = folder / binName(name);
    std::error_code error;
    uintmax_t bytes = fs::file_size(path, error);
    EMMY_INTERNAL_ASSERT(!error && bytes == buffer.byteSize(), "the harness wrote {} with {} bytes instead of {}",
                         path.string(), error ? 0 : bytes, buffer.byteSize());
    std::ifstream in(path, std::ios::binary);
    in.read(static_cast<char*>(buffer.data()), static_cast<std::streamsize>(buffer.byteSize()));
    EMMY_INTERNAL_ASSERT(in, "cannot read back {}", path.string());
    if (buffer.dtype() != DType::Bool) continue;
    const auto* values = static_cast<const uint8_t*>(buffer.data());
    for (size_t k = 0; k < buffer.byteSize(); ++k)
      if (values[k] > 1)
        return fmt::format("output {} element {} holds the byte 0x{:02x}, which is not a bool{}", name, k, values[k],
                           values[k] == kPoisonByte ? " (the generated code never wrote it)" : "");
  }
  return std::nullopt;
}

// Why a harness that did not exit with 0 failed: the host function's message as it is (status
// kHostFunctionFailed), else what `program` did, with its output.
std::string describeFailedRun(const ProcessOutcome& outcome, const std::string& program, std::chrono::seconds timeout) {
  std::string output = outcome.output;
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  switch (outcome.kind) {
    case ProcessOutcome::Kind::TimedOut:
      return fmt::format("{} did not finish in {} s", program, timeout.count());
    case ProcessOutcome::Kind::Signaled:
      return fmt::format("{} crashed ({}){}", program, strsignal(outcome.code), output.empty() ? "" : ":\n" + output);
    case ProcessOutcome::Kind::Exited:
      if (outcome.code == kHostFunctionFailed) return output;
      return fmt::format("{} exited with status {}{}", program, outcome.code, output.empty() ? "" : ":\n" + output);
  }
  return output;
}

}  // namespace

KernelRun runHarness(const tensor::Kernel& kernel, const tensor::EvaluationInputs& inputs, const fs::path& programFolder,
                     const std::vector<std::string>& arguments, const std::string& program, std::chrono::seconds timeout,
                     const std::function<void(const fs::path& runFolder)>& readMore) {
  TemporaryFolder folder(programFolder);  // one per run, so that runs cannot see each other's files
  std::map<std::string, Buffer> outputs = writeInputs(kernel, inputs, folder.path());
  std::vector<std::string> command = {(programFolder / kHarnessProgramName).string()};
  command.insert(command.end(), arguments.begin(), arguments.end());
  KernelRun result;
  ProcessOutcome ran = runProcess(command, folder.path(), folder.path() / "run.log", timeout);
  result.runSeconds = ran.seconds;
  if (ran.kind != ProcessOutcome::Kind::Exited || ran.code != 0) {
    result.failure = describeFailedRun(ran, program, timeout);
    result.timedOut = ran.kind == ProcessOutcome::Kind::TimedOut;
    return result;
  }
  result.failure = readOutputs(folder.path(), outputs);
  if (result.failure) return result;
  result.outputs = std::move(outputs);
  if (readMore) readMore(folder.path());
  return result;
}

std::string hostCompiler() {
  const char* fromEnvironment = std::getenv("CXX");
  if (fromEnvironment && *fromEnvironment) return fromEnvironment;
  // c++ is the system's default; a machine set up only for nvcc may have just g++ or clang++.
  const char* path = std::getenv("PATH");
  for (const char* candidate : {"c++", "g++", "clang++"}) {
    std::istringstream entries(path ? path : "");
    for (std::string entry; std::getline(entries, entry, ':');) {
      std::error_code error;
      if (fs::is_regular_file(fs::path(entry.empty() ? "." : entry) / candidate, error)) return candidate;
    }
  }
  return "c++";  // not found: running it says so
}

std::string compilerVersion(const std::string& compiler) {
  static std::mutex mutex;
  static std::map<std::string, std::string> versions;
  std::lock_guard<std::mutex> lock(mutex);
  auto known = versions.find(compiler);
  if (known != versions.end()) return known->second;
  std::string version;
  try {
    TemporaryFolder folder;
    ProcessOutcome outcome =
        runProcess({compiler, "--version"}, folder.path(), folder.path() / "version.log", std::chrono::seconds(30));
    if (outcome.kind == ProcessOutcome::Kind::Exited && outcome.code == 0) version = outcome.output;
  } catch (const UsageError&) {
  }
  return versions[compiler] = version;
}

bool isClang(const std::string& compiler) { return compilerVersion(compiler).find("clang") != std::string::npos; }

void writeText(const fs::path& path, const std::string& text) { writeFile(path, text.data(), text.size()); }

std::string firstLines(const std::string& text, size_t count) {
  std::istringstream lines(text);
  std::string result;
  size_t taken = 0;
  for (std::string line; std::getline(lines, line); ++taken) {
    if (taken == count) return result + "...\n";
    result += line + '\n';
  }
  return result;
}

}  // namespace emmy::harness
