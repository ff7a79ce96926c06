#include "tune/device.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "support/process.h"

namespace emmy::tune {

CudaDeviceProbe probeCudaDevicesInChild() {
  TemporaryFolder folder;
  std::filesystem::path answer = folder.path() / "devices";
  // The answer, a line per device ("NAME\tARCH"), or a line "-\tREASON".
  ProcessOutcome outcome = runInChild(
      [&] {
        CudaDeviceProbe probe = probeCudaDevices();
        std::ofstream out(answer);
        for (const CudaDevice& device : probe.devices) out << device.name << "\t" << device.arch << "\n";
        if (probe.devices.empty()) out << "-\t" << probe.reason << "\n";
        return 0;
      },
      folder.path() / "output.log", std::chrono::seconds(60));
  CudaDeviceProbe probe;
  std::istringstream lines(readWholeFile(answer));
  for (std::string line; std::getline(lines, line);) {
    size_t tab = line.find('\t');
    if (tab == std::string::npos) continue;
    if (line.substr(0, tab) == "-")
      probe.reason = line.substr(tab + 1);
    else
      probe.devices.push_back({line.substr(0, tab), line.substr(tab + 1)});
  }
  if (probe.devices.empty() && probe.reason.empty())
    probe.reason = outcome.kind == ProcessOutcome::Kind::TimedOut ? "the CUDA driver did not answer in 60 s"
                                                                   : "the CUDA driver crashed the process that asked it";
  return probe;
}

}  // namespace emmy::tune
