#include "driver/performance.h"

#include <algorithm>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "ir/tensor/evaluator.h"
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
};
constexpr Multiprocessor kMultiprocessors[] = {
    {75, 1024, 16, 64 * 1024}, {80, 2048, 32, 164 * 1024}, {86, 1536, 16, 100 * 1024},
    {89, 1536, 24, 100 * 1024}, {90, 2048, 32, 228 * 1024}};
constexpr int64_t kRegistersPerSm = 65536, kRegisterUnit = 256, kReservedSharedPerBlock = 1024;
// An H100/H200-class GPU: HBM3e bandwidth and FP32 (non-tensor-core) peak of an H200 SXM.
constexpr double kBandwidth = 4.8e12, kPeakFlops = 67e12;

const Multiprocessor& multiprocessor(const std::string& arch) {
  int capability = std::atoi(arch.c_str() + 3);  // sm_90 -> 90
  const Multiprocessor* best = &kMultiprocessors[0];
  for (const Multiprocessor& m : kMultiprocessors)
    if (m.capability <= capability) best = &m;
  return *best;
}

std::string occupancyLine(const kernel::Function& function, const KernelResources& resources, const std::string& arch) {
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
  double occupancy = 100.0 * static_cast<double>(blocks * warps) / (sm.maxThreads / 32);
  const std::array<int, 3>& t = function.blockThreads;
  std::string block = function.flatBlock() ? std::to_string(t[0]) : fmt::format("{}x{}x{}", t[0], t[1], t[2]);
  return fmt::format("  block {} threads; occupancy {:.0f}% on {} ({} blocks per SM, limited by {})", block, occupancy, arch,
                     blocks, tightest->second);
}

int64_t evaluateIndex(const Expr& e, const std::map<std::string, int64_t>& sizes) {
  if (const auto* immediate = e.as<tensor::IntImm>()) return immediate->value;
  if (const auto* size = e.as<tensor::SizeVar>()) return sizes.at(size->name);
  const auto* binary = e.as<tensor::Binary>();
  EMMY_INTERNAL_ASSERT(binary != nullptr, "a launch size is not arithmetic of the sizes");
  Value lhs = Value::ofInt(DType::I64, evaluateIndex(*binary->lhs, sizes));
  Value rhs = Value::ofInt(DType::I64, evaluateIndex(*binary->rhs, sizes));
  return tensor::applyBinary(binary->op, DType::I64, lhs, rhs).asInt();
}

// Arithmetic operations in an expression (comparisons, selects and conversions are free).
int64_t operationsIn(const Expr& e) {
  int64_t count = 0;
  tensor::forEachNode(e, [&](const Expr& node) {
    if (node.as<tensor::Unary>()) ++count;
    if (const auto* binary = node.as<tensor::Binary>();
        binary && !tensor::isComparison(binary->op) && binary->op != tensor::BinaryOp::And && binary->op != tensor::BinaryOp::Or)
      ++count;
  });
  return count;
}

// The flops a Loop IR nest does: the operations of every store, times the iterations around it.
double flopsOf(const loop::Stmt& stmt, double iterations, const std::map<std::string, int64_t>& sizes) {
  return loop::dispatch(stmt, [&](const auto& node) -> double {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, loop::For>)
      return flopsOf(*node.body, iterations * static_cast<double>(tensor::evaluateDim(node.extent, sizes)), sizes);
    else if constexpr (std::is_same_v<Node, loop::Allocate>)
      return flopsOf(*node.body, iterations, sizes);
    else if constexpr (std::is_same_v<Node, loop::Store>)
      return iterations * static_cast<double>(operationsIn(*node.value));
    else {
      double total = 0;
      for (const loop::StmtPtr& inner : node.stmts) total += flopsOf(*inner, iterations, sizes);
      return total;
    }
  });
}

// The global tensors a CUDA kernel reads and writes, each moved once (the least traffic possible).
double bytesMoved(const kernel::Function& function, const Lowered& lowered, const std::map<std::string, int64_t>& sizes) {
  std::map<std::string, tensor::Shape> shapes;
  std::map<std::string, DType> dtypes;
  for (const tensor::TensorParam& p : lowered.tensor.inputs) shapes[p.name] = p.shape, dtypes[p.name] = p.dtype;
  for (const tensor::TensorParam& p : lowered.tensor.outputs) shapes[p.name] = p.shape, dtypes[p.name] = p.dtype;
  for (const loop::Temporary& t : lowered.loop.temporaries) shapes[t.name] = t.shape, dtypes[t.name] = t.dtype;
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
        touched.insert(node.buffer);
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
    if (nest.name == function.name) work.flops = flopsOf(*nest.body, 1, sizes);
  return work;
}

std::string rooflineLine(const kernel::Function& function, const Lowered& lowered, const std::map<std::string, int64_t>& sizes) {
  std::string grid;
  for (int d = 0; d < 3; ++d) grid += (d ? "x" : "") + std::to_string(evaluateIndex(*function.gridBlocks[d], sizes));
  auto [bytes, flops] = functionWork(function, lowered, sizes);
  double memorySeconds = bytes / kBandwidth, computeSeconds = flops / kPeakFlops;
  std::string sizeText;
  for (const std::string& size : lowered.tensor.sizes) sizeText += fmt::format("{}{}={}", sizeText.empty() ? "" : " ", size, sizes.at(size));
  return fmt::format("  {}: grid {}; {} moved, {}; roofline bound {} on an H200-class GPU (4.8 TB/s, 67 TFLOP/s FP32), {}",
                     sizeText, grid, scaled(bytes, "B"), scaled(flops, "FLOP"), duration(std::max(memorySeconds, computeSeconds)),
                     memorySeconds >= computeSeconds ? "memory-bound" : "compute-bound");
}

}  // namespace

Work instanceWork(const Lowered& lowered, const std::map<std::string, int64_t>& sizes) {
  Work total;
  for (const kernel::Function& function : lowered.kernel.functions) {
    Work work = functionWork(function, lowered, sizes);
    total.bytes += work.bytes;
    total.flops += work.flops;
  }
  return total;
}

std::vector<std::string> performanceReport(const std::vector<Lowered>& lowered, const std::vector<KernelResources>& resources,
                                           const std::string& arch, const std::map<std::string, int64_t>& sizes) {
  std::vector<std::string> lines;
  size_t k = 0;
  for (const Lowered& instance : lowered)
    for (const kernel::Function& function : instance.kernel.functions) {
      EMMY_INTERNAL_ASSERT(k < resources.size(), "ptxas reported fewer kernels than were generated");
      std::string text = occupancyLine(function, resources[k++], arch);
      bool sized = std::all_of(instance.tensor.sizes.begin(), instance.tensor.sizes.end(),
                               [&](const std::string& size) { return sizes.count(size) > 0; });
      if (!sizes.empty() && sized) text += "\n" + rooflineLine(function, instance, sizes);
      lines.push_back(text);
    }
  return lines;
}

}  // namespace emmy
