#include "compiler/pipeline.h"

#include <filesystem>

#include "ir/kernel/hoist_row_values.h"
#include "ir/kernel/lower_tile_to_kernel.h"
#include "ir/kernel/narrow_guarded_loops.h"
#include "ir/kernel/place_barriers.h"
#include "ir/kernel/printer.h"
#include "ir/kernel/verifier.h"
#include "ir/loop/lower_tensor_to_loops.h"
#include "ir/loop/printer.h"
#include "ir/loop/verifier.h"
#include "ir/tensor/printer.h"
#include "ir/tile/apply_schedule.h"
#include "ir/tile/default_policy.h"
#include "ir/tile/printer.h"
#include "ir/tile/verifier.h"
#include "ir/tensor/verifier.h"

namespace emmy {

const std::vector<std::string>& passNames() {
  static const std::vector<std::string> names = {"elaborate", "lower-tensor-to-loops", "schedule", "lower-tile-to-kernel", "place-barriers", "hoist-row-values",
                                                 "narrow-guarded-loops"};
  return names;
}

namespace {

// Logs the IR after `pass` when asked to.
template <typename Print>
void dumpAfter(const PipelineOptions& options, const std::string& pass, Print print) {
  if (!options.dump || (options.dumpAfter != "all" && options.dumpAfter != pass)) return;
  *options.dump << "# after " << pass << "\n" << print() << "\n";
}

}  // namespace

cuda::GeneratedCuda emitCudaFiles(const std::vector<Lowered>& lowered, const std::string& sourceFile) {
  std::vector<kernel::Program> programs;
  for (const Lowered& instance : lowered) programs.push_back(instance.kernel);
  std::string baseName = std::filesystem::path(sourceFile).stem().string();
  return cuda::emitCuda(programs, baseName, std::filesystem::path(sourceFile).filename().string());
}

Lowered lower(const tensor::Kernel& kernel, const PipelineOptions& options) {
  Lowered lowered;
  lowered.tensor = kernel;
  tensor::verifyKernel(lowered.tensor);
  dumpAfter(options, "elaborate", [&] { return tensor::printKernel(lowered.tensor); });
  if (options.stopAfter == Level::Tensor) return lowered;

  lowered.loop = loop::lowerTensorToLoops(lowered.tensor);
  loop::verifyProgram(lowered.loop);
  dumpAfter(options, "lower-tensor-to-loops", [&] { return loop::printProgram(lowered.loop); });
  if (options.stopAfter == Level::Loop) return lowered;

  // One path: the kernel's own directives, checked, then the default policy's for what they leave open.
  Diagnostics scheduleErrors;
  tile::ScheduleModel model = tile::checkSchedule(lowered.loop, scheduleErrors);
  if (scheduleErrors.hasErrors()) throw CompilationFailed{scheduleErrors};
  std::vector<tensor::ScheduleParam> defaultParams;
  model = tile::completeSchedule(lowered.loop, model, defaultParams);
  lowered.tile = tile::applySchedule(lowered.loop, model, scheduleErrors);
  if (scheduleErrors.hasErrors()) throw CompilationFailed{scheduleErrors};
  lowered.tile.params = defaultParams;
  tile::verifyProgram(lowered.tile);
  dumpAfter(options, "schedule", [&] { return tile::printProgram(lowered.tile); });
  if (options.stopAfter == Level::Tile) return lowered;

  lowered.kernel = kernel::lowerTileToKernel(lowered.tile);
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "lower-tile-to-kernel", [&] { return kernel::printProgram(lowered.kernel); });

  lowered.kernel = kernel::placeBarriers(lowered.kernel, options.dropBarrier);
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "place-barriers", [&] { return kernel::printProgram(lowered.kernel); });

  lowered.kernel = kernel::hoistRowValues(lowered.kernel);
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "hoist-row-values", [&] { return kernel::printProgram(lowered.kernel); });

  lowered.kernel = kernel::narrowGuardedLoops(lowered.kernel);
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "narrow-guarded-loops", [&] { return kernel::printProgram(lowered.kernel); });
  return lowered;
}

std::vector<Lowered> lowerAll(const std::vector<tensor::Kernel>& kernels, const PipelineOptions& options) {
  std::vector<Lowered> lowered;
  Diagnostics scheduleErrors;
  for (const tensor::Kernel& kernel : kernels) {
    try {
      lowered.push_back(lower(kernel, options));
    } catch (const CompilationFailed& failed) {
      scheduleErrors.append(failed.diagnostics);
    }
  }
  if (scheduleErrors.hasErrors()) throw CompilationFailed{scheduleErrors};
  return lowered;
}

}  // namespace emmy
