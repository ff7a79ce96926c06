#include "performance/performance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "ir/kernel/index_widths.h"
#include "ir/tensor/evaluator.h"
#include "ir/tensor/printer.h"
#include "ir/tile/prefix_scan.h"
#include "ir/tile/nodes.h"
#include "performance/instruction_mix.h"
#include "ir/tensor/rewrite.h"
#include "ir/tensor/scalar_ops.h"
#include "support/diagnostics.h"

namespace emmy {

namespace {

using tensor::Expr;

// What one SM of a compute capability holds (CUDA C++ Programming Guide, "Compute Capabilities").
struct Multiprocessor {
  int capability;
  int maxThreads, maxBlocks;
  int64_t sharedBytes;
  int64_t sharedBytesPerBlock;  // the most a block may have, opting in
};
constexpr Multiprocessor kMultiprocessors[] = {
    {75, 1024, 16, 64 * 1024, 64 * 1024}, {80, 2048, 32, 164 * 1024, 163 * 1024}, {86, 1536, 16, 100 * 1024, 99 * 1024},
    {89, 1536, 24, 100 * 1024, 99 * 1024}, {90, 2048, 32, 228 * 1024, 227 * 1024}};
constexpr int64_t kRegistersPerSm = 65536, kRegisterUnit = 256, kReservedSharedPerBlock = 1024;
// An H100/H200-class GPU: HBM3e bandwidth, FP32 (non-tensor-core) peak and dense f16/bf16 tensor-core
// peak of an H200 SXM.
constexpr double kBandwidth = 4.8e12, kPeakFlops = 67e12, kTensorPeakFlops = 989e12;

const Multiprocessor& multiprocessor(const std::string& arch) {
  int capability = std::atoi(arch.c_str() + 3);  // sm_90 -> 90
  const Multiprocessor* best = &kMultiprocessors[0];
  for (const Multiprocessor& m : kMultiprocessors)
    if (m.capability <= capability) best = &m;
  return *best;
}

struct Occupancy {
  int64_t warps = 0;        // per block
  int64_t blocksPerSm = 0;  // resident at once
  double percent = 0;       // of the SM's warp slots
  const char* limitedBy = "";
};

Occupancy occupancyOf(const kernel::Function& function, const KernelResources& resources, const std::string& arch) {
  const Multiprocessor& sm = multiprocessor(arch);
  int threads = function.threadsPerBlock();
  int64_t warps = (threads + 31) / 32;
  int64_t registersPerWarp = (std::max(resources.registers, 1) * 32 + kRegisterUnit - 1) / kRegisterUnit * kRegisterUnit;
  std::vector<std::pair<int64_t, const char*>> limits{
      {sm.maxThreads / threads, "threads"},
      {sm.maxBlocks, "blocks"},
      {kRegistersPerSm / (registersPerWarp * warps), "registers"},
      {sm.sharedBytes / (resources.sharedBytes + kReservedSharedPerBlock), "shared memory"}};
  auto tightest = std::min_element(limits.begin(), limits.end());
  int64_t blocks = std::max<int64_t>(tightest->first, 0);
  return {warps, blocks, 100.0 * static_cast<double>(blocks * warps) / (sm.maxThreads / 32), tightest->second};
}

std::string occupancyLine(const kernel::Function& function, const KernelResources& resources, const std::string& arch) {
  Occupancy occupancy = occupancyOf(function, resources, arch);
  const std::array<int, 3>& t = function.blockThreads;
  std::string block = function.flatBlock() ? std::to_string(t[0]) : fmt::format("{}x{}x{}", t[0], t[1], t[2]);
  return fmt::format("  block {} threads; occupancy {:.0f}% on {} ({} blocks per SM, limited by {})", block, occupancy.percent,
                     arch, occupancy.blocksPerSm, occupancy.limitedBy);
}

// An expression of the sizes alone (a launch's grid or shared bytes, or a launch variant's condition,
// whose comparisons and conjunctions give 0 or 1; a kernel's test that its indices fit in 32 bits
// computes in f64), at `sizes`.
Value evaluateAtSizes(const Expr& e, const std::map<std::string, int64_t>& sizes) {
  if (const auto* immediate = e.as<tensor::IntImm>()) return Value::ofInt(immediate->dtype, immediate->value);
  if (const auto* immediate = e.as<tensor::FloatImm>()) return Value::ofFloat(immediate->dtype, immediate->value);
  if (const auto* constant = e.as<tensor::BoolImm>()) return Value::ofBool(constant->value);
  if (const auto* size = e.as<tensor::SizeVar>()) return Value::ofInt(DType::I64, sizes.at(size->name));
  if (const auto* limit = e.as<tensor::AxisVar>(); limit && kernel::isIndexLimit(limit->name))
    return Value::ofInt(DType::I64, kernel::kIndexLimit);
  if (const auto* cast = e.as<tensor::Cast>()) return evaluateAtSizes(*cast->operand, sizes).castTo(cast->dtype);
  if (const auto* unary = e.as<tensor::Unary>())
    return tensor::applyUnary(unary->op, unary->dtype, evaluateAtSizes(*unary->operand, sizes));
  const auto* binary = e.as<tensor::Binary>();
  EMMY_INTERNAL_ASSERT(binary != nullptr, "a launch size or condition is not arithmetic of the sizes");
  Value lhs = evaluateAtSizes(*binary->lhs, sizes), rhs = evaluateAtSizes(*binary->rhs, sizes);
  return tensor::applyBinary(binary->op, binary->lhs->dtype, lhs, rhs);
}

int64_t evaluateIndex(const Expr& e, const std::map<std::string, int64_t>& sizes) {
  return evaluateAtSizes(e, sizes).asInt();
}

// The shared memory sized at launch that the host function gives `function` at `sizes` on `arch`: what its
// buffers take on the path that takes the most of what the device lets a block have beside what it
// declares (`resources`), else 0.
int64_t launchSharedBytesAt(const kernel::Function& function, const KernelResources& resources, const std::string& arch,
                            const std::map<std::string, int64_t>& sizes) {
  int64_t limit = std::min(multiprocessor(arch).sharedBytesPerBlock - resources.sharedBytes, function.mostLaunchSharedBytes());
  int64_t given = 0;
  for (const tensor::ExprPtr& choice : function.launchSharedChoices())
    if (int64_t needed = evaluateIndex(*choice, sizes); needed <= limit) given = std::max(given, needed);
  return given;
}

// `resources` with the shared memory sized at launch that `function` has at `sizes`.
KernelResources atLaunch(const kernel::Function& function, KernelResources resources, const std::string& arch,
                         const std::map<std::string, int64_t>& sizes) {
  resources.sharedBytes += launchSharedBytesAt(function, resources, arch, sizes);
  return resources;
}

// Whether the launcher runs `function` at `sizes` (it may belong to a launch variant they do not choose).
bool launchedAt(const kernel::Function& function, const std::map<std::string, int64_t>& sizes) {
  if (function.launchWhen && evaluateIndex(*function.launchWhen, sizes) == 0) return false;
  return !function.indicesFit || (evaluateIndex(*function.indicesFit, sizes) != 0) == (function.indexBits == 32);
}

// Arithmetic operations on values in an expression (comparisons, selects and conversions are free, and
// so is a read's index arithmetic: `x[i * 2 - 1 + kh]` is one operand of a convolution's multiply-add).
int64_t operationsIn(const tensor::ExprPtr& e) {
  tensor::ExprPtr values = tensor::rewrite(e, [](const Expr& node) -> tensor::ExprPtr {
    return node.as<tensor::Load>() ? std::make_shared<tensor::FloatImm>(DType::F32, 0.0) : nullptr;
  });
  int64_t count = 0;
  tensor::forEachNode(*values, [&](const Expr& node) {
    if (node.as<tensor::Unary>()) ++count;
    if (const auto* binary = node.as<tensor::Binary>();
        binary && !tensor::isComparison(binary->op) && binary->op != tensor::BinaryOp::And && binary->op != tensor::BinaryOp::Or)
      ++count;
  });
  return count;
}

// Where the elements of each stage are needed: everywhere for an output; else where some reader needs
// them, which it does only where its own element is needed and, for a read on the true side of a
// `where` (a bounded reduction's terms, `sum[l < s + 1]`: causal attention's scores), where the
// condition holds. A condition over the stage's axes; null where it is needed everywhere, or where the
// reads say nothing simpler (an index that is not an axis of the reader, a condition on an axis that the
// read does not give).
class NeededElements {
public:
  explicit NeededElements(const tensor::Kernel& kernel) : kernel_(kernel) {}

  tensor::ExprPtr of(const tensor::Stage& stage) {
    if (auto known = known_.find(stage.name); known != known_.end()) return known->second;
    std::vector<tensor::ExprPtr> conditions;
    bool everywhere = kernel_.isOutput(stage.name);
    for (const tensor::Stage& reader : kernel_.stages)
      if (!everywhere && &reader != &stage && tensor::tensorsRead(*reader.body).count(stage.name))
        readsIn(*reader.body, of(reader), stage, conditions, everywhere);
    tensor::ExprPtr needed;
    if (!everywhere)
      for (const tensor::ExprPtr& condition : conditions) needed = needed ? bothOr(needed, condition) : condition;
    return known_[stage.name] = needed;
  }

private:
  static tensor::ExprPtr bothOr(tensor::ExprPtr a, tensor::ExprPtr b) {
    return std::make_shared<tensor::Binary>(DType::Bool, tensor::BinaryOp::Or, std::move(a), std::move(b));
  }
  static tensor::ExprPtr bothAnd(tensor::ExprPtr a, tensor::ExprPtr b) {
    if (!a || !b) return a ? a : b;
    return std::make_shared<tensor::Binary>(DType::Bool, tensor::BinaryOp::And, std::move(a), std::move(b));
  }

  // The reads of `stage` in `e`, each needed where `path` holds (null: everywhere), as conditions over
  // the stage's axes.
  void readsIn(const Expr& e, const tensor::ExprPtr& path, const tensor::Stage& stage, std::vector<tensor::ExprPtr>& conditions,
               bool& everywhere) {
    if (everywhere) return;
    if (const auto* select = e.as<tensor::Select>()) {
      readsIn(*select->condition, path, stage, conditions, everywhere);
      readsIn(*select->ifTrue, bothAnd(path, select->condition), stage, conditions, everywhere);
      readsIn(*select->ifFalse, path, stage, conditions, everywhere);
      return;
    }
    if (const auto* load = e.as<tensor::Load>(); load && load->tensor == stage.name) {
      std::map<std::string, tensor::ExprPtr> renamed;  // the reader's axis -> the stage's
      for (size_t d = 0; d < load->indices.size() && d < stage.axes.size(); ++d) {
        const auto* axis = load->indices[d]->as<tensor::AxisVar>();
        if (!axis || renamed.count(axis->name)) return void(everywhere = true);
        renamed[axis->name] = std::make_shared<tensor::AxisVar>(stage.axes[d].name);
      }
      bool given = path != nullptr;
      if (path)
        tensor::forEachNode(*path, [&](const Expr& node) {
          const auto* axis = node.as<tensor::AxisVar>();
          given = given && (!axis || renamed.count(axis->name));
        });
      if (!given) return void(everywhere = true);
      conditions.push_back(tensor::rewrite(path, [&](const Expr& node) -> tensor::ExprPtr {
        const auto* axis = node.as<tensor::AxisVar>();
        return axis ? renamed.at(axis->name) : nullptr;
      }));
    }
    auto visit = [&](const tensor::ExprPtr& child) { readsIn(*child, path, stage, conditions, everywhere); };
    tensor::dispatch(e, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, tensor::Load>) {
        for (const tensor::ExprPtr& index : node.indices) visit(index);
        if (node.padValue) visit(node.padValue);
      } else if constexpr (std::is_same_v<Node, tensor::Unary> || std::is_same_v<Node, tensor::Cast>) {
        visit(node.operand);
      } else if constexpr (std::is_same_v<Node, tensor::Binary>) {
        visit(node.lhs);
        visit(node.rhs);
      }
    });
  }

  const tensor::Kernel& kernel_;
  std::map<std::string, tensor::ExprPtr> known_;
};

// The share of a stage's work that is needed: of its elements where NeededElements limits them and, for a
// reduction whose body is where(condition, x, identity) (a bounded reduction, `sum[l < s + 1]`; a
// transposed convolution's taps between input elements), of its terms where the condition holds. The
// share of the values of the axes those conditions read at which they hold, at up to kMaskSamples
// points: every value of an axis where the budget allows, else values spread evenly over it.
constexpr double kMaskSamples = 1 << 18;
double neededShare(const tensor::Stage& stage, const tensor::ExprPtr& needed, const std::map<std::string, int64_t>& sizes) {
  std::optional<tensor::MaskedTerm> masked;
  if (stage.reduction) masked = tensor::maskedTerm(stage.body, stage.reduction->op);
  tensor::ExprPtr condition = needed;
  if (masked)
    condition = condition ? std::make_shared<tensor::Binary>(DType::Bool, tensor::BinaryOp::And, condition, masked->condition)
                          : masked->condition;
  if (!condition) return 1;
  std::map<std::string, int64_t> extents;
  for (const tensor::Axis& axis : stage.axes) extents[axis.name] = tensor::evaluateDim(axis.extent, sizes);
  if (stage.reduction)
    for (const tensor::Axis& axis : stage.reduction->axes) extents[axis.name] = tensor::evaluateDim(axis.extent, sizes);
  std::vector<std::string> read;
  bool evaluable = true;
  tensor::forEachNode(*condition, [&](const Expr& node) {
    if (const auto* axis = node.as<tensor::AxisVar>(); axis && std::find(read.begin(), read.end(), axis->name) == read.end())
      read.push_back(axis->name);
    evaluable = evaluable && (node.as<tensor::AxisVar>() || node.as<tensor::SizeVar>() || node.as<tensor::IntImm>() ||
                              node.as<tensor::BoolImm>() || (node.as<tensor::Binary>() && node.as<tensor::Binary>()->lhs->dtype != DType::F32));
  });
  if (!evaluable || read.empty()) return 1;
  // Every value of the short axes (a kernel's taps), the budget left shared by the others.
  auto extentOf = [&](const std::string& axis) { return extents.count(axis) ? extents.at(axis) : int64_t{1}; };
  std::sort(read.begin(), read.end(), [&](const std::string& a, const std::string& b) { return extentOf(a) < extentOf(b); });
  std::vector<int64_t> counts;
  double budget = kMaskSamples;
  for (size_t k = 0; k < read.size(); ++k) {
    auto even = static_cast<int64_t>(std::pow(budget, 1.0 / static_cast<double>(read.size() - k)));
    counts.push_back(std::max<int64_t>(1, std::min(extentOf(read[k]), even)));
    budget /= static_cast<double>(counts.back());
  }
  std::map<std::string, int64_t> at = sizes;
  std::function<int64_t(const Expr&)> value = [&](const Expr& e) -> int64_t {
    if (const auto* axis = e.as<tensor::AxisVar>()) return at.at(axis->name);
    if (const auto* binary = e.as<tensor::Binary>(); binary && (binary->op == tensor::BinaryOp::And || binary->op == tensor::BinaryOp::Or)) {
      bool lhs = value(*binary->lhs) != 0, rhs = value(*binary->rhs) != 0;
      return binary->op == tensor::BinaryOp::And ? lhs && rhs : lhs || rhs;
    }
    if (const auto* binary = e.as<tensor::Binary>())
      return tensor::applyBinary(binary->op, DType::I64, Value::ofInt(DType::I64, value(*binary->lhs)),
                                 Value::ofInt(DType::I64, value(*binary->rhs))).asInt();
    return evaluateIndex(e, at);
  };
  int64_t held = 0, samples = 0;
  std::function<void(size_t)> sample = [&](size_t k) {
    if (k == read.size()) {
      held += value(*condition) != 0, ++samples;
      return;
    }
    int64_t extent = extentOf(read[k]), count = counts[k];
    for (int64_t i = 0; i < count; ++i) {
      at[read[k]] = count == extent ? i : (2 * i + 1) * extent / (2 * count);
      sample(k + 1);
    }
  };
  sample(0);
  return samples ? static_cast<double>(held) / static_cast<double>(samples) : 1;
}

// The flops of a Tensor IR stage, computed once: its elements times the operations of its body and, for
// a reduction, times the reduced extent with one more operation per term (a sum of products is 2 per
// term: the convention's multiply-add), where they are needed (neededShare). Recomputation that a schedule causes (a stage computed inline
// once per use) is the schedule's cost, not the kernel's work: the instruction mix and issue time see it.
// So is a running reduction's (prefix_scan.h): each term is folded in once, as a scan does.
double stageFlops(const tensor::Stage& stage, const tensor::ExprPtr& needed, const std::map<std::string, int64_t>& sizes) {
  double elements = 1;
  for (const tensor::Axis& axis : stage.axes) elements *= static_cast<double>(tensor::evaluateDim(axis.extent, sizes));
  double perElement = static_cast<double>(operationsIn(stage.body));
  bool running = std::any_of(stage.axes.begin(), stage.axes.end(), [&](const tensor::Axis& axis) {
    return std::holds_alternative<tile::PrefixReduction>(tile::prefixReduction(stage, axis.name));
  });
  if (running) return elements * (perElement + 1);
  elements *= neededShare(stage, needed, sizes);
  if (stage.reduction) {
    double terms = 1;
    for (const tensor::Axis& axis : stage.reduction->axes) terms *= static_cast<double>(tensor::evaluateDim(axis.extent, sizes));
    if (auto masked = tensor::maskedTerm(stage.body, stage.reduction->op)) perElement = static_cast<double>(operationsIn(masked->value));
    perElement = terms * (perElement + 1);
  }
  return elements * perElement;
}

// The flops of the stages a CUDA kernel computes, each once.
double flopsOf(const loop::LoopNest& nest, const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes) {
  double total = 0;
  NeededElements needed(kernel);
  for (const tensor::Stage& stage : kernel.stages)
    if (std::find(nest.stages.begin(), nest.stages.end(), stage.name) != nest.stages.end())
      total += stageFlops(stage, needed.of(stage), sizes);
  return total;
}

// The dtypes (and, when asked, the shapes) of the tensors in global memory: inputs, outputs, temporaries.
std::map<std::string, DType> globalBuffers(const Lowered& lowered, std::map<std::string, tensor::Shape>* shapes = nullptr) {
  std::map<std::string, DType> dtypes;
  auto add = [&](const std::string& name, const tensor::Shape& shape, DType dtype) {
    dtypes[name] = dtype;
    if (shapes) (*shapes)[name] = shape;
  };
  for (const tensor::TensorParam& p : lowered.tensor.inputs) add(p.name, p.shape, p.dtype);
  for (const tensor::TensorParam& p : lowered.tensor.outputs) add(p.name, p.shape, p.dtype);
  for (const loop::Temporary& t : lowered.loop.temporaries) add(t.name, t.shape, t.dtype);
  return dtypes;
}

// The global tensors a CUDA kernel reads and writes, each moved once (the least traffic possible).
double bytesMoved(const kernel::Function& function, const Lowered& lowered, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, tensor::Shape> shapes;
  std::map<std::string, DType> dtypes = globalBuffers(lowered, &shapes);
  std::set<std::string> touched;
  std::function<void(const kernel::Stmt&)> visit = [&](const kernel::Stmt& stmt) {
    auto reads = [&](const tensor::ExprPtr& e) {
      if (e)
        tensor::forEachNode(*e, [&](const Expr& node) {
          if (const auto* load = node.as<tensor::Load>(); load && shapes.count(load->tensor)) touched.insert(load->tensor);
        });
    };
    kernel::dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, kernel::For>) {
        reads(node.begin), reads(node.end), reads(node.step), visit(*node.body);
      } else if constexpr (std::is_same_v<Node, kernel::Let>) {
        reads(node.value);
      } else if constexpr (std::is_same_v<Node, kernel::Store>) {
        if (shapes.count(node.buffer)) touched.insert(node.buffer);
        reads(node.index), reads(node.value);
      } else if constexpr (std::is_same_v<Node, kernel::If>) {
        reads(node.condition), visit(*node.body);
      } else if constexpr (std::is_same_v<Node, kernel::CopyAsync>) {
        touched.insert(node.source);
      } else if constexpr (std::is_same_v<Node, kernel::VectorLoad> || std::is_same_v<Node, kernel::VectorStore>) {
        if (shapes.count(node.buffer)) touched.insert(node.buffer);
      } else if constexpr (std::is_same_v<Node, kernel::IfAligned>) {
        visit(*node.aligned), visit(*node.otherwise);
      } else if constexpr (std::is_same_v<Node, kernel::Block>) {
        for (const kernel::StmtPtr& inner : node.stmts) visit(*inner);
      }
    });
  };
  visit(*function.body);
  double bytes = 0;
  for (const std::string& tensor : touched) {
    double elements = 1;
    for (const tensor::Dim& dim : shapes.at(tensor)) elements *= static_cast<double>(tensor::evaluateDim(dim, sizes));
    bytes += elements * dtypeBytes(dtypes.at(tensor));
  }
  return bytes;
}

std::string scaled(double value, const char* unit) {
  const char* prefixes[] = {"", "k", "M", "G", "T"};
  int k = 0;
  while (value >= 1000 && k < 4) value /= 1000, ++k;
  return fmt::format("{:.2f} {}{}", value, prefixes[k], unit);
}

std::string duration(double seconds) {
  if (seconds >= 1e-3) return fmt::format("{:.2f} ms", seconds * 1e3);
  return fmt::format("{:.2f} us", seconds * 1e6);
}

Work functionWork(const kernel::Function& function, const Lowered& lowered, const std::map<std::string, int64_t>& sizes) {
  Work work{bytesMoved(function, lowered, sizes), 0};
  for (const loop::LoopNest& nest : lowered.loop.kernels)
    if (nest.stages == function.stages) work.flops = flopsOf(nest, lowered.tensor, sizes);  // (a launch variant's names differ)
  return work;
}

// "N=4096 D=1024": the sizes of `kernel` at `sizes`.
std::string sizesText(const tensor::Kernel& kernel, const std::map<std::string, int64_t>& sizes) {
  std::string text;
  for (const std::string& size : kernel.sizes) text += fmt::format("{}{}={}", text.empty() ? "" : " ", size, sizes.at(size));
  return text;
}

// `tensorCores`: the kernel's PTX uses them, so its arithmetic is bounded by their peak, not FP32's.
std::string rooflineLine(const kernel::Function& function, const Lowered& lowered, const std::map<std::string, int64_t>& sizes,
                         bool tensorCores) {
  std::string grid;
  for (int d = 0; d < 3; ++d) grid += (d ? "x" : "") + std::to_string(evaluateIndex(*function.gridBlocks[d], sizes));
  auto [bytes, flops] = functionWork(function, lowered, sizes);
  double memorySeconds = bytes / kBandwidth, computeSeconds = flops / (tensorCores ? kTensorPeakFlops : kPeakFlops);
  return fmt::format("  {}: grid {}; {} moved, {}; roofline bound {} on an H200-class GPU (4.8 TB/s, {}), {}",
                     sizesText(lowered.tensor, sizes), grid,
                     scaled(bytes, "B"), scaled(flops, "FLOP"), duration(std::max(memorySeconds, computeSeconds)),
                     tensorCores ? "989 TFLOP/s on tensor cores" : "67 TFLOP/s FP32",
                     memorySeconds >= computeSeconds ? "memory-bound" : "compute-bound");
}

// The bytes one thread moves to and from global and shared memory, counted on thread 0 of block 0 as a
// stand-in for every thread: each access times the trips of the loops around it (their bounds evaluated
// with that thread's indices; a bound that cannot be evaluated counts once), every branch taken but those
// the sizes rule out for every thread, a branch on a loop's variable in the share of its iterations that
// take it (iterationShare); and the barriers it passes. An
// access in a fully unrolled loop whose index does not depend on that loop's variable counts once for
// it: the CUDA compiler keeps such a value in a register (the point of register blocking).
class AccessCounter {
public:
  // `launchShared`: the bytes of shared memory sized at launch that the launch gives the kernel.
  AccessCounter(const kernel::Function& function, const Lowered& lowered, const std::map<std::string, int64_t>& sizes,
                int64_t launchShared)
      : sizes_(sizes), blockThreads_(function.blockThreads), global_(globalBuffers(lowered)) {
    values_[tile::kLaunchSharedBytes] = launchShared;
    for (int d = 0; d < 3; ++d) {
      std::string axis(1, "xyz"[d]);
      values_["threadIdx." + axis] = 0;
      values_["blockIdx." + axis] = 0;
      values_["blockDim." + axis] = function.blockThreads[d];
      values_["gridDim." + axis] = evaluateIndex(*function.gridBlocks[d], sizes);
    }
  }

  void count(const kernel::Stmt& stmt) {
    kernel::dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, kernel::For>) {
        std::optional<int64_t> begin = evaluate(*node.begin), end = evaluate(*node.end), step = evaluate(*node.step);
        double trips = 1;
        if (begin && end && step && *step > 0) trips = *end > *begin ? static_cast<double>((*end - *begin + *step - 1) / *step) : 0;
        // Over the blocks of the grid (n = blockIdx.x; n < N; n += gridDim.x), block 0 takes the most trips,
        // ceil(N / grid), and the blocks N / grid on average: the count stands for every block.
        bool overBlocks = false;
        tensor::forEachNode(*node.begin, [&](const Expr& e) {
          const auto* axis = e.as<tensor::AxisVar>();
          overBlocks = overBlocks || (axis && axis->name.rfind("blockIdx.", 0) == 0);
        });
        if (overBlocks && begin && end && step && *step > 0)
          trips = *end > *begin ? static_cast<double>(*end - *begin) / static_cast<double>(*step) : 0;
        // A bound that moves with the block (causal attention's tiles of keys, fewer for the first
        // queries): the mean of block 0's trips and the last block's, exact where they move linearly.
        if (!overBlocks && begin && end && step && *step > 0) {
          std::map<std::string, int64_t> lastBlock = lastBlockIndices();
          std::optional<int64_t> lastBegin = evaluate(*node.begin, &lastBlock), lastEnd = evaluate(*node.end, &lastBlock);
          if (lastBegin && lastEnd && (*lastBegin != *begin || *lastEnd != *end))
            trips = (trips + (*lastEnd > *lastBegin ? static_cast<double>((*lastEnd - *lastBegin + *step - 1) / *step) : 0)) / 2;
        }
        values_[node.var] = begin.value_or(0);
        definitions_[node.var] = node.begin.get();
        dependencies_[node.var] = {node.var};
        loops_.push_back({node.var, trips, node.unroll, &node});
        count(*node.body);
        loops_.pop_back();
      } else if constexpr (std::is_same_v<Node, kernel::Let>) {
        reads(*node.value);
        values_[node.var] = evaluate(*node.value).value_or(0);
        definitions_[node.var] = node.value.get();
        dependencies_[node.var] = loopsIn(node.value.get());
      } else if constexpr (std::is_same_v<Node, kernel::Declare>) {
        if (node.memory == kernel::Memory::Shared) shared_[node.buffer] = node.dtype;
      } else if constexpr (std::is_same_v<Node, kernel::Store>) {
        if (node.index) reads(*node.index);
        reads(*node.value);
        access(node.buffer, node.index.get());
      } else if constexpr (std::is_same_v<Node, kernel::If>) {
        reads(*node.condition);
        if (!ruledOut(*node.condition)) {
          shares_.push_back(iterationShare(*node.condition));
          count(*node.body);
          shares_.pop_back();
        }
      } else if constexpr (std::is_same_v<Node, kernel::CopyAsync>) {
        int bytes = node.lanes * dtypeBytes(node.dtype);
        copiedBytes += access(node.source, node.sourceIndex.get(), bytes);
        access(node.buffer, node.index.get(), bytes);
      } else if constexpr (std::is_same_v<Node, kernel::LoadMatrix>) {
        reads(*node.element);
        access(node.buffer, node.element.get(), 16);  // each lane's row of 8 16-bit elements
      } else if constexpr (std::is_same_v<Node, kernel::VectorLoad>) {
        reads(*node.element);
        synchronousLoadBytes += access(node.buffer, node.element.get(), node.bytes);
      } else if constexpr (std::is_same_v<Node, kernel::VectorStore>) {
        reads(*node.element);
        access(node.buffer, node.element.get(), node.bytes);
      } else if constexpr (std::is_same_v<Node, kernel::IfAligned>) {
        count(*node.aligned);
      } else if constexpr (std::is_same_v<Node, kernel::Barrier>) {
        barriers += times(nullptr);
      } else if constexpr (std::is_same_v<Node, kernel::Block>) {
        for (const kernel::StmtPtr& inner : node.stmts) count(*inner);
      }
    });
  }

  double barriers = 0;
  // Of the global bytes a thread moves, those of loads it waits for, whose pace the loads in flight set,
  // and those of asynchronous copies, which stay in flight while the thread goes on.
  double synchronousLoadBytes = 0, copiedBytes = 0;
  double memoryInstructions = 0;  // global and shared loads and stores
  // Per warp: each global access's 32-byte sectors times its trips, and the sectors its lanes' bytes would
  // take side by side (the ideal): a warp whose lanes read rows far apart moves a sector a lane.
  double globalSectors = 0, idealGlobalSectors = 0, globalRequests = 0;
  double sharedWavefronts = 0;    // per warp: each shared access's wavefronts (1 + bank conflicts) times its trips

private:
  struct Loop {
    std::string var;
    double trips;
    bool unrolled;
    const kernel::For* node;
  };

  // The block indices of the grid's last block, for `evaluate`.
  std::map<std::string, int64_t> lastBlockIndices() const {
    std::map<std::string, int64_t> last;
    for (const char* axis : {"x", "y", "z"}) last[std::string("blockIdx.") + axis] = values_.at(std::string("gridDim.") + axis) - 1;
    return last;
  }

  // The share of the iterations of the innermost loop `condition` reads in which it holds, the mean of
  // block 0's and the last block's, as for trips (causal attention's tiles of keys below the diagonal,
  // which run without a mask, and the others); 1 where it reads a thread's index or no loop.
  double iterationShare(const Expr& condition) const {
    std::set<std::string> read;
    std::function<void(const Expr&)> visit = [&](const Expr& e) {
      tensor::forEachNode(e, [&](const Expr& node) {
        const auto* axis = node.as<tensor::AxisVar>();
        if (!axis || !read.insert(axis->name).second) return;
        if (auto definition = definitions_.find(axis->name); definition != definitions_.end() && definition->second)
          visit(*definition->second);
      });
    };
    visit(condition);
    for (const std::string& name : read)
      if (name.rfind("threadIdx.", 0) == 0) return 1;
    const Loop* loop = nullptr;
    for (auto it = loops_.rbegin(); it != loops_.rend() && !loop; ++it)
      if (read.count(it->var)) loop = &*it;
    if (!loop || loop->unrolled) return 1;
    constexpr int64_t kMostSamples = 4096;
    double held = 0, trips = 0;
    for (bool last : {false, true}) {
      std::map<std::string, int64_t> at = last ? lastBlockIndices() : std::map<std::string, int64_t>{};
      std::optional<int64_t> begin = evaluate(*loop->node->begin, &at), end = evaluate(*loop->node->end, &at),
                             step = evaluate(*loop->node->step, &at);
      if (!begin || !end || !step || *step <= 0) return 1;
      int64_t count = *end > *begin ? (*end - *begin + *step - 1) / *step : 0;
      int64_t samples = std::min(count, kMostSamples);
      for (int64_t i = 0; i < samples; ++i) {
        at[loop->var] = *begin + (samples == count ? i : (2 * i + 1) * count / (2 * samples)) * *step;
        std::optional<int64_t> holds = evaluate(condition, &at);
        if (!holds) return 1;
        held += *holds != 0 ? static_cast<double>(count) / static_cast<double>(samples) : 0;
      }
      trips += static_cast<double>(count);
    }
    return trips > 0 ? held / trips : 1;
  }

  // The loop variables `e` depends on, through the lets it names.
  std::set<std::string> loopsIn(const Expr* e) const {
    std::set<std::string> loops;
    if (e)
      tensor::forEachNode(*e, [&](const Expr& node) {
        if (const auto* axis = node.as<tensor::AxisVar>())
          if (auto found = dependencies_.find(axis->name); found != dependencies_.end())
            loops.insert(found->second.begin(), found->second.end());
      });
    return loops;
  }

  // Does `condition` fail for every thread at these sizes: it reads sizes, constants and the launch's
  // shared memory only (a path the sizes choose, as a row kernel's shared-memory path), and is false?
  bool ruledOut(const Expr& condition) const {
    bool uniform = true;
    tensor::forEachNode(condition, [&](const Expr& e) {
      const auto* axis = e.as<tensor::AxisVar>();
      uniform = uniform && !(axis && !kernel::isLaunchSharedBytes(axis->name)) && !e.as<tensor::Load>() &&
                !e.as<tensor::ScalarParam>();
    });
    std::optional<int64_t> value = uniform ? evaluate(condition) : std::nullopt;
    return value && *value == 0;
  }

  // How often an access at `index` runs (null: an access without an index, as a scalar's).
  double times(const Expr* index) const {
    std::set<std::string> depends = loopsIn(index);
    double product = 1;
    for (const Loop& loop : loops_)
      if (!loop.unrolled || depends.count(loop.var)) product *= loop.trips;
    for (double share : shares_) product *= share;
    return product;
  }

  // An access by each thread of `bytes` (0: one element) from element `index` of `buffer`; its global
  // bytes (0 for shared memory).
  double access(const std::string& buffer, const Expr* index, int bytes = 0) {
    double moved = 0;
    if (auto global = global_.find(buffer); global != global_.end()) {
      int elementBytes = dtypeBytes(global->second), width = bytes ? bytes : elementBytes;
      moved = times(index) * width;
      memoryInstructions += times(index);
      auto [sectors, ideal] = warpSectors(index, elementBytes, width);
      globalSectors += times(index) * sectors;
      // Requests as docs/profile.md counts them: a part of a warp's access of 128 bytes at most.
      globalRequests += times(index) * std::ceil(warpLanes() * width / 128.0);
      idealGlobalSectors += times(index) * ideal;
    }
    if (auto shared = shared_.find(buffer); shared != shared_.end()) {
      int elementBytes = dtypeBytes(shared->second);
      memoryInstructions += times(index);
      sharedWavefronts += times(index) * wavefronts(index, elementBytes, bytes ? bytes : elementBytes);
    }
    return moved;
  }

  // The wavefronts of a warp's access to a shared array at `index`, for the first warp of the block at
  // the first trip of every loop: its lanes' indices evaluated with their own thread indices, grouped by
  // the hardware's rule (32 banks of 4-byte words; a request per 128 bytes of the warp's accesses; lanes
  // on different words of one bank take a pass each). 1 when an index cannot be evaluated.
  double wavefronts(const Expr* index, int elementBytes, int bytes) const {
    if (!index) return 1;
    int lanes = warpLanes();
    int phaseLanes = bytes <= 4 ? 32 : bytes <= 8 ? 16 : 8;
    double total = 0;
    for (int phase = 0; phase * phaseLanes < lanes; ++phase) {
      std::map<int64_t, std::set<int64_t>> wordsPerBank;
      for (int lane = phase * phaseLanes; lane < std::min(lanes, (phase + 1) * phaseLanes); ++lane) {
        std::map<std::string, int64_t> thread = threadOfLane(lane);
        std::optional<int64_t> element = evaluate(*index, &thread);
        if (!element) return 1;
        for (int64_t word = *element * elementBytes / 4; word <= (*element * elementBytes + bytes - 1) / 4; ++word)
          wordsPerBank[((word % 32) + 32) % 32].insert(word);
      }
      size_t passes = 1;
      for (const auto& [bank, words] : wordsPerBank) passes = std::max(passes, words.size());
      total += static_cast<double>(passes);
    }
    return total;
  }

  // The 32-byte sectors of a warp's access of `bytes` a lane to a global array at `index`, for the first warp
  // of the block at the first trip of every loop (as wavefronts), and the ideal: its lanes' bytes side by
  // side. An index that cannot be evaluated is taken as ideal; an access without one is the same address
  // for every lane.
  std::pair<double, double> warpSectors(const Expr* index, int elementBytes, int bytes) const {
    int lanes = warpLanes();
    double ideal = std::ceil(lanes * bytes / 32.0);
    if (!index) return {std::ceil(bytes / 32.0), std::ceil(bytes / 32.0)};
    std::set<int64_t> sectors;
    for (int lane = 0; lane < lanes; ++lane) {
      std::map<std::string, int64_t> thread = threadOfLane(lane);
      std::optional<int64_t> element = evaluate(*index, &thread);
      if (!element) return {ideal, ideal};
      int64_t first = *element * elementBytes;
      for (int64_t sector = floorDivide(first, 32); sector <= floorDivide(first + bytes - 1, 32); ++sector) sectors.insert(sector);
    }
    return {static_cast<double>(sectors.size()), std::min(ideal, static_cast<double>(sectors.size()))};
  }

  // The lanes of the block's first warp (all of a block smaller than a warp).
  int warpLanes() const { return std::min(32, blockThreads_[0] * blockThreads_[1] * blockThreads_[2]); }

  // The thread indices of lane `lane` of the block's first warp.
  std::map<std::string, int64_t> threadOfLane(int lane) const {
    return {{"threadIdx.x", lane % blockThreads_[0]},
            {"threadIdx.y", lane / blockThreads_[0] % blockThreads_[1]},
            {"threadIdx.z", lane / (blockThreads_[0] * blockThreads_[1])}};
  }

  static int64_t floorDivide(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

  void reads(const Expr& e) {
    tensor::forEachNode(e, [&](const Expr& node) {
      if (const auto* load = node.as<tensor::Load>())
        for (const tensor::ExprPtr& index : load->indices.empty() ? std::vector<tensor::ExprPtr>{nullptr} : load->indices)
          synchronousLoadBytes += access(load->tensor, index.get());
    });
  }

  // `thread`: the thread indices of another thread than thread 0, whose lets and loop variables (at their
  // first trip) are evaluated again from their definitions.
  std::optional<int64_t> evaluate(const Expr& e, const std::map<std::string, int64_t>* thread = nullptr) const {
    if (const auto* immediate = e.as<tensor::IntImm>()) return immediate->value;
    if (const auto* size = e.as<tensor::SizeVar>()) return sizes_.at(size->name);
    if (const auto* axis = e.as<tensor::AxisVar>()) {
      if (thread) {
        if (auto own = thread->find(axis->name); own != thread->end()) return own->second;
        if (auto definition = definitions_.find(axis->name); definition != definitions_.end() && definition->second)
          return evaluate(*definition->second, thread);
      }
      auto value = values_.find(axis->name);
      return value == values_.end() ? std::nullopt : std::optional<int64_t>(value->second);
    }
    if (const auto* cast = e.as<tensor::Cast>(); cast && isInteger(cast->dtype)) return evaluate(*cast->operand, thread);
    if (const auto* select = e.as<tensor::Select>()) {
      std::optional<int64_t> condition = evaluate(*select->condition, thread);
      if (!condition) return std::nullopt;
      return evaluate(*condition ? *select->ifTrue : *select->ifFalse, thread);
    }
    if (const auto* unary = e.as<tensor::Unary>(); unary && unary->op == tensor::UnaryOp::Not) {
      std::optional<int64_t> operand = evaluate(*unary->operand, thread);
      return operand ? std::optional<int64_t>(*operand == 0) : std::nullopt;
    }
    const auto* binary = e.as<tensor::Binary>();
    if (binary && (binary->op == tensor::BinaryOp::And || binary->op == tensor::BinaryOp::Or)) {
      std::optional<int64_t> lhs = evaluate(*binary->lhs, thread), rhs = evaluate(*binary->rhs, thread);
      if (!lhs || !rhs) return std::nullopt;
      return binary->op == tensor::BinaryOp::And ? (*lhs != 0 && *rhs != 0) : (*lhs != 0 || *rhs != 0);
    }
    if (!binary || !isInteger(binary->lhs->dtype)) return std::nullopt;
    std::optional<int64_t> lhs = evaluate(*binary->lhs, thread), rhs = evaluate(*binary->rhs, thread);
    if (!lhs || !rhs) return std::nullopt;
    Value result = tensor::applyBinary(binary->op, DType::I64, Value::ofInt(DType::I64, *lhs), Value::ofInt(DType::I64, *rhs));
    return result.asInt();
  }

  const std::map<std::string, int64_t>& sizes_;
  std::array<int, 3> blockThreads_;
  std::map<std::string, DType> global_, shared_;
  std::map<std::string, int64_t> values_;
  std::map<std::string, const Expr*> definitions_;  // of each let and loop variable (its first trip)
  std::map<std::string, std::set<std::string>> dependencies_;  // of each loop variable and let: loop variables
  std::vector<Loop> loops_;                                     // around the statement counted
  std::vector<double> shares_;  // of the iterations of their loops in which the branches around it run
};

// The rest of an H200-class GPU the time model needs: SMs and their clock, the bandwidth of L2, the
// tensor-core peak (dense f16/bf16), the warps an SM needs resident to hide memory latency, the time a
// barrier stalls a block, and a kernel launch. Shared memory serves one wavefront per clock per SM.
constexpr double kMultiprocessorCount = 132, kClock = 1.98e9, kL2Bandwidth = 10e12;
constexpr double kWarpsToHideLatency = 16, kBarrierSeconds = 40 / kClock, kLaunchSeconds = 3e-6;
// A global load's latency under load (DRAM; assumed, not yet measured here): by Little's law the machine
// reaches its bandwidth only with bandwidth x latency bytes in flight, about 25 KB per SM; a kernel whose
// resident threads keep fewer (LoopMix::loadBytesInFlight) moves its bytes at that share of the bandwidth.
constexpr double kLoadLatencySeconds = 700e-9;
constexpr double kBytesInFlightPerSm = kBandwidth * kLoadLatencySeconds / kMultiprocessorCount;
// The part of the issue time that the memory time does not hide when memory bounds the kernel: of two
// candidates that move the same bytes, the one that issues fewer instructions is faster.
constexpr double kUnhiddenIssue = 0.1;
// A candidate that spills is ranked after every one that does not.
constexpr double kSpillPenaltySeconds = 1e3;
constexpr int kAssumedRegisters = 32;

struct KernelTime {
  double seconds;
  std::string summary;
};

// The terms of a CUDA kernel's time at `sizes`, each the time its work takes on the whole machine.
struct KernelTerms {
  double memory = 0, l2 = 0, shared = 0, issue = 0, arithmetic = 0;
  double sectorsPerRequest = 0, idealSectorsPerRequest = 0;  // of a warp's global accesses (l2's sectors)
  // The memory time at the bandwidth the loads kept in flight reach (memory where they reach all of it).
  double memoryInFlight = 0;
  double bytesInFlightPerSm = 0;  // 0: not limited (asynchronous copies, or no global loads)
  double waitedShare = 1;         // of the global loads at these sizes, those a thread waits for
  double waves = 0, lastWaveShare = 1;  // of blocks as many as the SMs hold, the last one that full
  double blocks = 1;                    // of the grid
  Occupancy occupancy;
  bool tensorCores = false;
  double barriers = 0;  // per thread
};

KernelTerms kernelTerms(const kernel::Function& function, const Lowered& lowered, const KernelMix* mix,
                        const KernelResources& resources, const std::string& arch, const std::map<std::string, int64_t>& sizes) {
  double blocks = 1;
  for (const tensor::ExprPtr& extent : function.gridBlocks) blocks *= static_cast<double>(evaluateIndex(*extent, sizes));
  double warps = blocks * std::ceil(function.threadsPerBlock() / 32.0);
  AccessCounter counter(function, lowered, sizes, launchSharedBytesAt(function, resources, arch, sizes));
  counter.count(*function.body);
  KernelTerms terms;
  terms.blocks = blocks;
  terms.tensorCores = mix && mix->usesTensorCores();
  double flops = functionWork(function, lowered, sizes).flops;
  terms.memory = bytesMoved(function, lowered, sizes) / kBandwidth;
  terms.l2 = counter.globalSectors * 32 * warps / kL2Bandwidth;
  terms.sectorsPerRequest = counter.globalRequests > 0 ? counter.globalSectors / counter.globalRequests : 0;
  terms.idealSectorsPerRequest = counter.globalRequests > 0 ? counter.idealGlobalSectors / counter.globalRequests : 0;
  terms.shared = counter.sharedWavefronts * warps / (kMultiprocessorCount * kClock);
  terms.issue = mix ? mix->cyclesPerMemoryInstruction() * counter.memoryInstructions * warps / (kMultiprocessorCount * kClock) : 0;
  terms.arithmetic = flops / (terms.tensorCores ? kTensorPeakFlops : kPeakFlops);
  terms.barriers = counter.barriers;
  terms.memoryInFlight = terms.memory;
  Occupancy& occupancy = terms.occupancy = occupancyOf(function, atLaunch(function, resources, arch, sizes), arch);
  std::optional<KernelMix::InFlight> inFlight = mix ? mix->loadBytesInFlight() : std::nullopt;
  double perBlock = inFlight ? function.threadsPerBlock() * inFlight->bytes : 0;
  if (perBlock > 0 && occupancy.blocksPerSm > 0) {
    // The blocks run in waves of as many as the SMs hold. Each wave moves its blocks' bytes at the share
    // of the bandwidth its loads in flight reach, so a last wave of few blocks (a tail) takes longer
    // than its bytes alone would.
    double perSm = static_cast<double>(occupancy.blocksPerSm), capacity = perSm * kMultiprocessorCount;
    // Only the loads a thread waits for are paced so: where the sizes take a path of asynchronous copies
    // (a row kernel's rows that fit in shared memory), the loop the mix measured does not run.
    double fullWaves = std::floor(blocks / capacity), rest = blocks - fullWaves * capacity;
    auto slowdown = [&](double blocksPerSm) { return std::max(1.0, kBytesInFlightPerSm / (blocksPerSm * perBlock)); };
    double loaded = counter.synchronousLoadBytes + counter.copiedBytes;
    double waited = terms.waitedShare = loaded > 0 ? counter.synchronousLoadBytes / loaded : 1;
    terms.bytesInFlightPerSm = std::min(perSm, blocks / kMultiprocessorCount) * perBlock;
    terms.memoryInFlight = terms.memory * (1 - waited) +
                           waited * terms.memory / blocks *
                               (fullWaves * capacity * slowdown(perSm) + (rest > 0 ? rest * slowdown(rest / kMultiprocessorCount) : 0));
    terms.waves = fullWaves + (rest > 0 ? 1 : 0);
    terms.lastWaveShare = rest > 0 ? rest / capacity : 1;
  }
  return terms;
}

KernelTime estimateKernel(const kernel::Function& function, const Lowered& lowered, const KernelResources& resources,
                          const KernelMix* mix, const std::string& arch, const std::map<std::string, int64_t>& sizes) {
  KernelTerms terms = kernelTerms(function, lowered, mix, resources, arch, sizes);
  const double blocks = terms.blocks;
  const Occupancy& occupancy = terms.occupancy;
  std::pair<double, const char*> bounds[] = {{terms.memoryInFlight, terms.memoryInFlight > terms.memory ? "loads in flight" : "memory"},
                                             {terms.l2, "L2 traffic"},
                                             {terms.shared, "shared-memory wavefronts"},
                                             {terms.issue, "instruction issue"},
                                             {terms.arithmetic, terms.tensorCores ? "tensor-core arithmetic" : "FP32 arithmetic"}};
  const auto& bound = *std::max_element(std::begin(bounds), std::end(bounds));
  if (occupancy.blocksPerSm == 0)
    return {std::numeric_limits<double>::infinity(), fmt::format("{}: a block does not fit on an SM ({})", function.name,
                                                                  occupancy.limitedBy)};
  // The blocks each SM holds at once, the waves they run in, and how much of the machine is busy.
  double perSm = std::min<double>(static_cast<double>(occupancy.blocksPerSm), std::ceil(blocks / kMultiprocessorCount));
  double waves = std::ceil(blocks / (perSm * kMultiprocessorCount));
  double busy = blocks / (waves * perSm * kMultiprocessorCount);
  double hiding = std::min(1.0, perSm * static_cast<double>(occupancy.warps) / kWarpsToHideLatency);
  double unhidden = bound.second == std::string("instruction issue") ? 0 : kUnhiddenIssue * terms.issue;
  // The memory term, where the loads in flight are known, runs the waves itself (kernelTerms), each at the
  // bandwidth its own loads reach: its tail and its latency are counted there.
  bool memoryInWaves = &bound == &bounds[0] && terms.waves > 0;
  double seconds = (bound.first + unhidden) / (memoryInWaves ? 1 : busy * hiding) + terms.barriers * waves * kBarrierSeconds +
                   kLaunchSeconds;
  std::string summary = fmt::format("{}: {:.0f} blocks in {:.0f} wave(s) of {:.0f} per SM, {:.0f}% of the machine busy, "
                                    "{:.0f}% latency hidden, bound by {}",
                                    function.name, blocks, waves, perSm, 100 * busy, 100 * hiding, bound.second);
  int64_t spilled = resources.spillStoreBytes + resources.spillLoadBytes;
  if (spilled > 0) {
    seconds += kSpillPenaltySeconds;
    summary += fmt::format("; SPILLS ({} bytes stored, {} loaded per thread): ranked last", resources.spillStoreBytes,
                           resources.spillLoadBytes);
  }
  return {seconds, summary};
}

// The instruction mix of `function`, from the mixes of its program's PTX.
const KernelMix* mixOf(const std::vector<KernelMix>& mixes, const std::string& function) {
  for (const KernelMix& mix : mixes)
    if (mix.name == function) return &mix;
  return nullptr;
}

// The --stats lines of the instruction mix: each innermost loop's, and with sizes the issue time beside the
// memory time.
std::string mixLines(const kernel::Function& function, const Lowered& lowered, const KernelMix& mix,
                     const KernelResources& resources, const std::string& arch, const std::map<std::string, int64_t>* sizes) {
  std::string text;
  for (const LoopMix& loop : mix.loops)
    text += fmt::format("\n  {} at PTX line {}, per thread iteration{}: {}", loop.innermost ? "innermost loop" : "loop",
                        loop.ptxLine, loop.innermost ? "" : " (without its inner loops)", describeLoop(loop));
  if (mix.loops.empty()) text += fmt::format("\n  no loop; the whole kernel: {}", describeLoop(mix.whole));
  if (sizes) {
    KernelTerms terms = kernelTerms(function, lowered, &mix, resources, arch, *sizes);
    text += fmt::format("\n  issue time {} against memory time {}, L2 traffic {} ({:.2f} sectors per request, ideal {:.2f}), "
                        "shared-memory wavefronts {}, arithmetic {} ({})",
                        duration(terms.issue), duration(terms.memory), duration(terms.l2), terms.sectorsPerRequest,
                        terms.idealSectorsPerRequest, duration(terms.shared), duration(terms.arithmetic),
                        terms.l2 > std::max({terms.issue, terms.memory, terms.shared, terms.arithmetic})
                            ? "L2-bound: the sectors its warps touch, not the least bytes, limit it"
                        : terms.issue > terms.memory ? "issue-bound: instructions, not bytes, limit it"
                                                     : "issue below memory");
    if (std::optional<KernelMix::InFlight> inFlight = mix.loadBytesInFlight())
      text += fmt::format("\n  global loads in flight: {:g} bytes a thread ({}), {} per SM of the {} the bandwidth needs "
                          "(Little's law at {:.0f} ns): memory time {}{}",
                          inFlight->bytes, inFlight->ptxLine ? fmt::format("loop at PTX line {}", inFlight->ptxLine) : "the kernel",
                          scaled(terms.bytesInFlightPerSm, "B"), scaled(kBytesInFlightPerSm, "B"), kLoadLatencySeconds * 1e9,
                          duration(terms.memoryInFlight),
                          terms.memoryInFlight > terms.memory ? fmt::format(" ({:.0f}% of the bandwidth)", 100 * terms.memory / terms.memoryInFlight) : "");
    if (terms.waitedShare < 1)
      text += fmt::format(" (at these sizes {:.0f}% of the bytes loaded are loads a thread waits for, the rest asynchronous copies)",
                          100 * terms.waitedShare);
    if (terms.waves > 1 && terms.lastWaveShare < 1)
      text += fmt::format("; the blocks run in {:g} waves, the last {:.0f}% full", terms.waves, 100 * terms.lastWaveShare);
  }
  return text;
}

}  // namespace

Work instanceWork(const Lowered& lowered, const std::map<std::string, int64_t>& sizes) {
  Work total;
  for (const kernel::Function& function : lowered.kernel.functions) {
    if (!launchedAt(function, sizes)) continue;
    Work work = functionWork(function, lowered, sizes);
    total.bytes += work.bytes;
    total.flops += work.flops;
  }
  return total;
}

std::optional<Work> kernelWork(const Lowered& lowered, const std::string& function, const std::map<std::string, int64_t>& sizes) {
  for (const kernel::Function& candidate : lowered.kernel.functions)
    if (candidate.name == function) return functionWork(candidate, lowered, sizes);
  return std::nullopt;
}

namespace {

// `given` with the kernel's derived sizes added, when it holds every other size; a dimension that comes out
// negative there is the user's error.
std::map<std::string, int64_t> withDerivedSizes(const tensor::Kernel& kernel, std::map<std::string, int64_t> given) {
  if (std::all_of(kernel.sizes.begin(), kernel.sizes.end(), [&](const std::string& size) { return given.count(size) > 0; })) {
    try {
      tensor::bindDerivedSizes(kernel, given);
    } catch (const tensor::EvaluationError& error) {
      throw UsageError(fmt::format("kernel {}: {}", kernel.instanceName(), error.what()));
    }
  }
  return given;
}

}  // namespace

std::vector<std::string> performanceReport(const std::vector<Lowered>& lowered, const std::vector<KernelResources>& resources,
                                           const std::string& ptx, const std::string& arch,
                                           const std::map<std::string, int64_t>& givenSizes) {
  std::vector<KernelMix> mixes = instructionMix(ptx);
  std::vector<std::string> lines;
  size_t k = 0;
  for (const Lowered& instance : lowered)
    for (const kernel::Function& function : instance.kernel.functions) {
      EMMY_INTERNAL_ASSERT(k < resources.size(), "ptxas reported fewer kernels than were generated");
      const KernelResources& used = resources[k++];
      std::map<std::string, int64_t> sizes = withDerivedSizes(instance.tensor, givenSizes);
      bool sized = !sizes.empty() && std::all_of(instance.tensor.sizes.begin(), instance.tensor.sizes.end(),
                                                 [&](const std::string& size) { return sizes.count(size) > 0; });
      std::string text = occupancyLine(function, sized ? atLaunch(function, used, arch, sizes) : used, arch);
      if (function.launchSharedBytes())
        text += sized ? fmt::format("; shared memory sized at launch: {} bytes", launchSharedBytesAt(function, used, arch, sizes))
                      : fmt::format("; plus shared memory sized at launch (up to {} bytes)", function.mostLaunchSharedBytes());
      const KernelMix* mix = mixOf(mixes, function.name);
      bool tensorCores = mix && mix->usesTensorCores();
      if (sized && !launchedAt(function, sizes)) {
        // The launch variant's condition where the sizes choose another, else the test of its indices.
        std::string where = function.launchWhen && evaluateIndex(*function.launchWhen, sizes) == 0
                                ? tensor::printExpr(*function.launchWhen)
                                : (function.indexBits == 32 ? "" : "not ") + tensor::printExpr(*function.indicesFit);
        text += fmt::format("\n  {}: not launched (it runs where {})", sizesText(instance.tensor, sizes), where);
        sized = false;
      }
      if (sized) text += "\n" + rooflineLine(function, instance, sizes, tensorCores);
      if (mix) text += mixLines(function, instance, *mix, used, arch, sized ? &sizes : nullptr);
      lines.push_back(text);
    }
  return lines;
}

TimeEstimate estimateTime(const Lowered& lowered, const CudaCompileResult* compiled, const std::string& arch,
                          const std::map<std::string, int64_t>& givenSizes) {
  std::map<std::string, int64_t> sizes = withDerivedSizes(lowered.tensor, givenSizes);
  std::vector<KernelResources> resources = compiled ? resourceUsage(*compiled) : std::vector<KernelResources>{};
  std::vector<KernelMix> mixes = compiled ? instructionMix(compiled->ptx) : std::vector<KernelMix>{};
  TimeEstimate estimate;
  size_t k = 0;
  for (const kernel::Function& function : lowered.kernel.functions) {
    KernelResources assumed{function.name, kAssumedRegisters, 0, 0, function.declaredSharedBytes()};
    EMMY_INTERNAL_ASSERT(!compiled || k < resources.size(), "ptxas reported fewer kernels than were generated");
    const KernelResources& used = compiled ? resources[k++] : assumed;
    if (!launchedAt(function, sizes)) continue;
    KernelTime time = estimateKernel(function, lowered, used, mixOf(mixes, function.name), arch, sizes);
    estimate.seconds += time.seconds;
    estimate.summary += (estimate.summary.empty() ? "" : "; ") + time.summary;
  }
  return estimate;
}

}  // namespace emmy
