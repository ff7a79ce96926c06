// Section 5: "`emmy build --emit schedule` prints the schedule that was used, in this syntax, so a user
// can start from it". For every kernel instance of the examples, the standard library and the lowering
// tests (the golden files' sources among them), the printed schedule pasted into a copy of the file in
// place of the kernel's own builds byte-identical CUDA.
#include <catch2/catch.hpp>

#include <sstream>

#include "compiler/pipeline.h"
#include "frontend/frontend.h"
#include "ir/tile/printer.h"
#include "schedule_round_trip.h"
#include "golden_files.h"
#include "test_kernels.h"

namespace emmy::testing {

namespace fs = std::filesystem;

std::string withSchedule(const std::string& source, const std::string& kernel, const std::string& schedule) {
  std::istringstream lines(source);
  std::string out, line;
  bool inOwn = false;
  while (std::getline(lines, line)) {
    if (!inOwn && (line.rfind("schedule " + kernel + " {", 0) == 0 || line.rfind("schedule " + kernel + "<", 0) == 0)) {
      inOwn = line.find('}') == std::string::npos;
      continue;
    }
    if (inOwn) {
      inOwn = line.rfind("}", 0) != 0;
      continue;
    }
    out += line + "\n";
  }
  return out + "\n" + schedule;
}

namespace {

// The instances of `source` (as the file `name` in `directory`), by instance name.
std::map<std::string, tensor::Kernel> instancesOf(const std::string& source, const fs::path& name) {
  Diagnostics diagnostics;
  Frontend frontend(diagnostics, {Frontend::defaultStdlibDir()});
  std::map<std::string, tensor::Kernel> instances;
  if (const ast::Module* module = frontend.loadText(name.string(), source, name.parent_path()))
    for (const tensor::Kernel& kernel : frontend.elaborateAll(*module)) instances.emplace(kernel.instanceName(), kernel);
  INFO(source << diagnostics.render());
  REQUIRE_FALSE(diagnostics.hasErrors());
  return instances;
}

std::string cudaOf(const tensor::Kernel& kernel, const fs::path& name) {
  return emitCudaFiles({lower(kernel, PipelineOptions{})}, name.string()).source;
}

}  // namespace

size_t checkScheduleRoundTrip(const std::string& source, const fs::path& name, const std::string& only) {
  std::map<std::string, tensor::Kernel> instances = instancesOf(source, name);
  size_t checked = 0;
  for (const auto& [instance, kernel] : instances) {
    if (!only.empty() && kernel.name != only) continue;
    ++checked;
    Lowered lowered = lower(kernel, PipelineOptions{});
    std::string printed = tile::printSchedule(lowered.tile);
    std::string copy = withSchedule(source, kernel.name, printed);
    INFO(name.string() << ": " << instance << " with the schedule\n" << printed);
    std::map<std::string, tensor::Kernel> pasted = instancesOf(copy, name);
    REQUIRE(pasted.count(instance));
    CHECK(cudaOf(pasted.at(instance), name) == emitCudaFiles({lowered}, name.string()).source);
    // The printed schedule leaves the default policy nothing to add.
    CHECK(lower(pasted.at(instance), PipelineOptions{}).tile.params.empty());
  }
  return checked;
}

}  // namespace emmy::testing

namespace emmy {

TEST_CASE("the printed schedule of every example, stdlib and lowering-test kernel builds the same CUDA", "[schedule]") {
  size_t instances = 0;
  for (const std::filesystem::path& file : testing::loweringSources())
    instances += testing::checkScheduleRoundTrip(testing::readFile(file), file);
  CHECK(instances > 50);
  WARN(instances << " kernel instances round-tripped");
}

TEST_CASE("a pasted schedule replaces the kernel's own block and nothing else", "[schedule]") {
  const std::string source = "kernel a(x: f32[N]) -> (y: f32[N]) {\n    y[i] = x[i]\n}\n"
                             "schedule a {\n    bind y.i to block.x\n}\n"
                             "schedule ab { bind z.i to block.x }\n";
  CHECK(testing::withSchedule(source, "a", "schedule a {\n}\n") ==
        "kernel a(x: f32[N]) -> (y: f32[N]) {\n    y[i] = x[i]\n}\nschedule ab { bind z.i to block.x }\n\n"
        "schedule a {\n}\n");
}

}  // namespace emmy
