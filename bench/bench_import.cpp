// Import latency: a generated TorchScript graph of about 200 nodes (a chain of matrix products and
// elementwise work over four weights), saved, then imported through the importer's API. Prints the
// median of the load (torch::jit::load, freezing and the graph passes) and, separately, of the walk
// (translation to .emmy source, printing, and the frontend's check of that source), in milliseconds,
// against the project's budget of 100 ms for the walk.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/script.h>

#include "importer/import_model.h"
#include "support/process.h"

namespace {

constexpr double kWalkBudgetMs = 100;
constexpr int kRuns = 9;

double milliseconds(std::chrono::steady_clock::duration duration) {
  return std::chrono::duration<double, std::milli>(duration).count();
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// Each step is a few nodes: a product with a weight, or a tanh, a scale and a residual add.
std::string chainSource(int steps) {
  std::string source = "def forward(self, x):\n    h = x\n";
  for (int k = 0; k < steps; ++k)
    source += k % 2 == 0 ? fmt::format("    h = torch.matmul(h, self.w{})\n", k / 2 % 4)
                         : "    h = torch.tanh(h) * 0.5 + h\n";
  return source + "    return h\n";
}

}  // namespace

int main() {
  emmy::TemporaryFolder scratch;
  std::string path = (scratch.path() / "chain.pt").string();
  torch::jit::Module module("Chain");
  for (int k = 0; k < 4; ++k) module.register_parameter(fmt::format("w{}", k), torch::randn({64, 64}), false);
  module.define(chainSource(100));
  module.save(path);

  emmy::importer::ImportOptions options;
  options.inputs.push_back(emmy::importer::parseInputSpec("x=f32[N,64]"));
  std::vector<double> loads, walks;
  size_t nodes = 0;
  for (int run = 0; run <= kRuns; ++run) {  // run 0 warms up
    emmy::Diagnostics diagnostics;
    auto start = std::chrono::steady_clock::now();
    emmy::importer::LoadedModelPtr model = emmy::importer::loadModel(path, diagnostics);
    auto loaded = std::chrono::steady_clock::now();
    std::optional<std::string> source = model ? emmy::importer::translateModel(*model, options, diagnostics) : std::nullopt;
    auto walked = std::chrono::steady_clock::now();
    if (!source) {
      fmt::print(stderr, "import failed:\n{}", diagnostics.render());
      return 1;
    }
    nodes = emmy::importer::graphNodeCount(*model);
    if (run == 0) continue;
    loads.push_back(milliseconds(loaded - start));
    walks.push_back(milliseconds(walked - loaded));
  }
  double walk = median(walks);
  fmt::print("import of a {}-node graph (median of {} runs): load+freeze+passes {:.1f} ms, walk+print+check {:.1f} ms "
             "(budget {:.0f} ms for the walk: {})\n",
             nodes, kRuns, median(loads), walk, kWalkBudgetMs, walk <= kWalkBudgetMs ? "ok" : "over");
  return 0;
}
