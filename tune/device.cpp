#include "tune/device.h"

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>

#include "support/process.h"

namespace emmy::tune {

namespace {

// The answer as text: "device" then the name on a line of its own and the numbers on the next, or
// "none" then the reason.
void writeProbe(const std::filesystem::path& path, const runtime::DeviceProbe& probe) {
  std::ofstream out(path);
  if (!probe.device) {
    out << "none\n" << probe.reason;
    return;
  }
  const runtime::CudaDevice& d = *probe.device;
  out << "device\n" << d.name << "\n" << d.major << " " << d.minor << " " << d.multiprocessors << " " << d.smClockKHz << " "
      << d.memoryClockKHz << " " << d.busWidthBits << " " << d.l2Bytes << " " << d.memoryBytes << " " << d.driverVersion << "\n";
}

std::optional<runtime::DeviceProbe> readProbe(const std::filesystem::path& path) {
  std::istringstream in(readWholeFile(path));
  std::string kind;
  if (!std::getline(in, kind)) return std::nullopt;
  runtime::DeviceProbe probe;
  if (kind == "none") {
    std::getline(in, probe.reason, '\0');
    return probe;
  }
  runtime::CudaDevice d;
  if (kind != "device" || !std::getline(in, d.name) ||
      !(in >> d.major >> d.minor >> d.multiprocessors >> d.smClockKHz >> d.memoryClockKHz >> d.busWidthBits >> d.l2Bytes >>
        d.memoryBytes >> d.driverVersion))
    return std::nullopt;
  probe.device = d;
  return probe;
}

}  // namespace

runtime::DeviceProbe probeCudaDeviceInChild() {
  // The driver already answered this process (a test that ran kernels here), and a forked child could not
  // use it: ask it here.
  if (runtime::cudaDriverInitializedHere()) return runtime::probeCudaDevice();
  TemporaryFolder folder;
  std::filesystem::path answer = folder.path() / "device";
  ProcessOutcome outcome = runInChild(
      [&] {
        writeProbe(answer, runtime::probeCudaDevice());
        return 0;
      },
      folder.path() / "output.log", std::chrono::seconds(60));
  if (std::optional<runtime::DeviceProbe> probe = readProbe(answer)) return *probe;
  return {std::nullopt, outcome.kind == ProcessOutcome::Kind::TimedOut ? "the CUDA driver did not answer in 60 s"
                                                                       : "the CUDA driver crashed the process that asked it"};
}

}  // namespace emmy::tune
