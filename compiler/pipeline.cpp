#include "compiler/pipeline.h"

#include <filesystem>

#include "ir/kernel/hoist_row_values.h"
#include "ir/kernel/index_widths.h"
#include "ir/kernel/lower_tile_to_kernel.h"
#include "ir/kernel/narrow_guarded_loops.h"
#include "ir/kernel/place_barriers.h"
#include "ir/kernel/printer.h"
#include "ir/kernel/verifier.h"
#include "ir/loop/lower_tensor_to_loops.h"
#include "ir/loop/printer.h"
#include "ir/loop/verifier.h"
#include "ir/tensor/approximate_exponentials.h"
#include "ir/tensor/launch_variants.h"
#include "ir/tensor/printer.h"
#include "ir/tile/apply_schedule.h"
#include "ir/tile/default_policy.h"
#include "ir/tile/printer.h"
#include "ir/tile/verifier.h"
#include "ir/tensor/verifier.h"

namespace emmy {

const std::vector<std::string>& passNames() {
  static const std::vector<std::string> names = {"elaborate", "approximate-exponentials", "lower-tensor-to-loops", "schedule", "lower-tile-to-kernel", "place-barriers", "hoist-row-values",
                                                 "narrow-guarded-loops", "index-widths"};
  return names;
}

namespace {

// Logs the IR after `pass` when asked to; `variant` names the launch variant, and where it runs, when
// there are several.
template <typename Print>
void dumpAfter(const PipelineOptions& options, const std::string& pass, const std::string& variant, Print print) {
  if (!options.dump || (options.dumpAfter != "all" && options.dumpAfter != pass)) return;
  *options.dump << "# after " << pass << (variant.empty() ? "" : " (launch variant " + variant + ")") << "\n" << print() << "\n";
}

// One launch variant of a kernel (the kernel itself when it has one), down to `options.stopAfter`.
Lowered lowerVariant(const tensor::LaunchVariant& launchVariant, const PipelineOptions& options) {
  const tensor::Kernel& kernel = launchVariant.kernel;
  const std::string variant =
      launchVariant.when ? launchVariant.name + ", launched where " + tensor::printExpr(*launchVariant.when) : "";
  Lowered lowered;
  lowered.tensor = kernel;
  lowered.loop = loop::lowerTensorToLoops(lowered.tensor);
  loop::verifyProgram(lowered.loop);
  dumpAfter(options, "lower-tensor-to-loops", variant, [&] { return loop::printProgram(lowered.loop); });
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
  dumpAfter(options, "schedule", variant, [&] { return tile::printProgram(lowered.tile); });
  if (options.stopAfter == Level::Tile) return lowered;

  lowered.kernel = kernel::lowerTileToKernel(lowered.tile);
  for (kernel::Function& function : lowered.kernel.functions) function.launchWhen = launchVariant.when;
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "lower-tile-to-kernel", variant, [&] { return kernel::printProgram(lowered.kernel); });

  lowered.kernel = kernel::placeBarriers(lowered.kernel, options.dropBarrier);
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "place-barriers", variant, [&] { return kernel::printProgram(lowered.kernel); });

  lowered.kernel = kernel::hoistRowValues(lowered.kernel);
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "hoist-row-values", variant, [&] { return kernel::printProgram(lowered.kernel); });

  lowered.kernel = kernel::narrowGuardedLoops(lowered.kernel);
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "narrow-guarded-loops", variant, [&] { return kernel::printProgram(lowered.kernel); });

  lowered.kernel = kernel::chooseIndexWidths(lowered.kernel);
  kernel::verifyProgram(lowered.kernel);
  dumpAfter(options, "index-widths", variant, [&] { return kernel::printProgram(lowered.kernel); });
  return lowered;
}

}  // namespace

cuda::GeneratedCuda emitCudaFiles(const std::vector<Lowered>& lowered, const std::string& sourceFile) {
  std::vector<kernel::Program> programs;
  for (const Lowered& instance : lowered) programs.push_back(instance.kernel);
  std::string baseName = std::filesystem::path(sourceFile).stem().string();
  return cuda::emitCuda(programs, baseName, std::filesystem::path(sourceFile).filename().string());
}

Lowered lower(const tensor::Kernel& kernel, const PipelineOptions& options) {
  tensor::verifyKernel(kernel);
  dumpAfter(options, "elaborate", "", [&] { return tensor::printKernel(kernel); });
  if (options.stopAfter == Level::Tensor) return Lowered{kernel, {}, {}, {}};
  tensor::Kernel approximated = tensor::approximateExponentials(kernel);
  tensor::verifyKernel(approximated);
  dumpAfter(options, "approximate-exponentials", "", [&] { return tensor::printKernel(approximated); });

  // Each launch variant is lowered on its own; the first one's Loop and Tile IR stand for the kernel's
  // (they print the same schedule), and the launcher runs the kernels of the variant the sizes choose.
  std::vector<tensor::LaunchVariant> variants = tensor::launchVariants(approximated);
  Lowered lowered;
  for (const tensor::LaunchVariant& variant : variants) {
    Lowered one = lowerVariant(variant, options);
    if (&variant == &variants.front()) {
      lowered = std::move(one);
      continue;
    }
    EMMY_INTERNAL_ASSERT(one.kernel.temporaries.size() == lowered.kernel.temporaries.size(),
                         "the launch variants of {} have different temporaries", kernel.instanceName());
    for (kernel::Function& function : one.kernel.functions) lowered.kernel.functions.push_back(std::move(function));
  }
  lowered.tensor = kernel;
  lowered.kernel.source = kernel;
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
