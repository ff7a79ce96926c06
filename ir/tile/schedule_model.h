// The loops a kernel's schedule describes, stage by stage, and the legality of every directive
// (section 5 of the language). Each stage starts with one loop per axis (its reduction axes innermost);
// `split`, `tile`, `fuse` and `reorder` rewrite that list, `bind`, `unroll` and `vectorize` mark its
// loops, and `compute`, `inline`, `root` and `cache` place stages and copies. An illegal directive is a
// diagnostic on its line that says why and, where there is a choice, lists the legal alternatives; the
// model goes on without it, so that every error of a schedule is reported.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ir/loop/nodes.h"
#include "support/diagnostics.h"

namespace emmy::tile {

// A loop of a stage after the directives so far.
struct ScheduledLoop {
  std::string name;
  std::optional<int64_t> extent;  // when it is a constant
  std::string extentText;         // for messages: "M", "ceil(M / 64)", "16"
  // The inner loop of a split or tile: its factor as written (a param keeps its name, so that the default
  // policy's directives that take the same extent print it too).
  std::optional<tensor::Number> written;
  bool reduction = false;
  // How each axis of the stage moves with this loop: axis = ... + coefficient * loop + ... A loop made
  // by `fuse` moves its axes in no affine way (`fused`).
  std::map<std::string, int64_t> coefficients;
  bool fused = false;
  std::optional<tensor::HardwareIndex> binding;
  bool atomic = false, unrolled = false, vectorized = false;
  // Of a loop bound to grid.x (`vectorize S.a by W`): each thread takes groups of this many consecutive
  // iterations, read and written 16 bytes at a time.
  int64_t groupWidth = 1;
  SourceLoc boundAt;  // the bind directive
};

// Bound to thread.* or warp.x (each thread runs the iteration at its own index); to block.* or grid.x
// (shared out among blocks); to grid.x.
inline bool boundToThreads(const ScheduledLoop& loop) {
  return loop.binding && (loop.binding->scope == tensor::HardwareScope::Thread || loop.binding->scope == tensor::HardwareScope::Warp);
}
inline bool boundToBlocks(const ScheduledLoop& loop) {
  return loop.binding && (loop.binding->scope == tensor::HardwareScope::Block || loop.binding->scope == tensor::HardwareScope::Grid);
}
inline bool boundToGrid(const ScheduledLoop& loop) { return loop.binding && loop.binding->scope == tensor::HardwareScope::Grid; }

enum class Placement { Default, Inline, Root, ComputeAt };

// A copy of (part of) a tensor made by `cache`.
struct CacheStage {
  std::string name;
  std::string source;         // the tensor it copies
  std::string atStage, atLoop;
  tensor::CacheMemory memory = tensor::CacheMemory::Shared;
  std::vector<int64_t> shape;  // the footprint, one extent per dimension of the source
  int64_t pad = 0;            // extra elements per row (`pad`)
  bool doubleBuffered = false;
  int elementBytes = 4;
  SourceLoc loc;
  // The last dimension is read whole and its extent is a size, not a constant: the copy is sized at
  // launch to the row, in the shared memory the device lets a block have, of at most shape.back()
  // elements (the most any device allows, or a launch variant's longest row), and the kernel reads
  // through it only where the launch gave it its bytes, from the source itself elsewhere (a row read
  // once, and a second path for long rows).
  bool wholeRows = false;
  // Whole rows that every launch gives their bytes: a launch variant's rows of at most
  // kWholeRowCacheBytes, with the kernel's other such copies and its static shared memory within what a
  // block may always have (ScheduleChecker::checkSharedMemory). The kernel then has no second path.
  bool alwaysFits = false;
};

// How `split`, `tile` and `fuse` made loops from others: split {a} -> {ao, ai} by factor (a = ao *
// factor + ai), fuse {a, b} -> {ab} (a = ab / extent(b), b = ab % extent(b)).
struct LoopDerivation {
  std::vector<std::string> from, to;
  int64_t factor = 0;  // of a split; 0 for a fuse
};

// `mma S (a, b, c) by (WM, WN) stages N`: the loops a and b (the block's part of the product's rows m
// and columns n) and c (a slice of its reduction k) run on mma.sync.m16n8k16. The block's warps split
// its rows by WM and its columns by WN, each warp a WM x WN tile of fragments in registers, and the
// slices of both operands each iteration of the loop over the rest of k reads are copied into shared
// memory through a ring of N stages of asynchronous copies.
struct ProductTile {
  std::string rowLoop, colLoop, depthLoop;
  std::string m, n, k;  // the axes they run over
  int64_t warpRows = 0, warpCols = 0, stages = 0;
  SourceLoc loc;
};

// `scan S.t by (THREADS, ITEMS)`: the loop over t and the reduction loop over k of a running reduction
// (prefix_scan.h) run as a block-level scan of THREADS threads, ITEMS elements a thread per tile.
struct ScanTile {
  std::string axis, k;  // the loops, which are the axes t and k themselves
  int64_t threads = 0, items = 0;
  bool inclusive = true;
  SourceLoc loc;
};

struct StageSchedule {
  std::string name;
  std::vector<ScheduledLoop> loops;  // outermost first
  std::vector<LoopDerivation> derivations;  // in the order the directives made them
  Placement placement = Placement::Default;
  std::string atStage, atLoop;       // for ComputeAt
  SourceLoc placedAt;                // the directive that placed it
  // For ComputeAt: the part of the stage its consumer reads in one iteration of the loop, one extent per
  // dimension, and where it lives: shared memory when the loop is outside every thread loop, else
  // registers.
  std::vector<int64_t> footprint;
  tensor::CacheMemory memory = tensor::CacheMemory::Registers;
  int64_t pad = 0;  // extra elements per row of that part in shared memory (`pad`)
  // A root scheduled with the reduction it applies its expression to (`epilogueReduction`): the
  // reduction's loops are the root's, after its own, and the reduction has no directives of its own.
  std::string epilogueReduction;  // of the root: the reduction
  std::string epilogueOf;         // of the reduction: the root
  // A softmax's maximum or sum that a root computes online in its reduction loops (`onlineSoftmax`):
  // the root. It has no directives of its own.
  std::string onlineIn;
  // `mma S (a, b, c) by (WM, WN) stages N`: a, b and c run on the tensor cores (matrix_product.h).
  std::optional<ProductTile> product;
  // `scan S.t by (THREADS, ITEMS)`: t and its reduction run as a block-level scan (prefix_scan.h).
  std::optional<ScanTile> scan;
  // `threads S N`: the block's size of the kernel of a root whose loop is bound to grid.x.
  std::optional<int64_t> threads;
  SourceLoc threadsAt;
  // `index_bits S N` of a kernel's root: 64, its index arithmetic is 64-bit at every size; 32, 32-bit
  // where the launcher sees that every index fits (ir/kernel/index_widths.h), as without it.
  std::optional<int64_t> indexBits;
  SourceLoc indexBitsAt;
};

struct ScheduleModel {
  std::map<std::string, StageSchedule> stages;
  std::vector<CacheStage> caches;
  // The caches whose directives were passed over (of a stage never computed, or a callee's cache the
  // caller rules out), by name: not applied, nor printed with the schedule.
  std::set<std::string> passedOverCaches;
  // What the default policy says of its choices (why a contraction is not on the tensor cores), printed
  // with the schedule as comments.
  std::vector<std::string> notes;
};

// The extent of the part of one dimension of a tensor read at `index` (over a stage's axes) while the
// loops `varying` run and the others stay, past `extent` too where they overrun it. Nullopt when it is
// not a constant: then `symbolicLoop` is the varying loop whose extent is not, or null when the read
// spans the whole dimension (`extent`).
std::optional<int64_t> footprintWidth(const tensor::Expr& index, const std::vector<const ScheduledLoop*>& varying,
                                      const tensor::Dim& extent, const ScheduledLoop** symbolicLoop);

// a - b, when the two indices differ by a constant (the same multiples of the same variables).
std::optional<int64_t> constantDistance(const tensor::Expr& a, const tensor::Expr& b);

// Is `index` never negative: affine in loop variables (which are), with no negative coefficient or constant?
bool nonNegative(const tensor::Expr& index);

// Does a directive of `kernel`'s schedule name a stage of `nest`?
bool scheduleNames(const tensor::Kernel& kernel, const loop::LoopNest& nest);

// The model of `program.source.schedule` over `program`'s stages and nests. Errors go to `diagnostics`.
ScheduleModel checkSchedule(const loop::Program& program, Diagnostics& diagnostics);

// The most shared memory a block may declare statically (CUDA's limit without opting in, on every
// target Emmy supports).
constexpr int64_t kStaticSharedMemoryBytes = 48 * 1024;
// The most threads a block may have.
constexpr int64_t kMaxThreadsPerBlock = 1024;
// A copy of whole rows that a launch variant bounds to this many bytes (its short rows) counts toward the
// shared memory a block may always have, so every launch gives it its bytes (where the kernel's others
// leave room: CacheStage::alwaysFits).
constexpr int64_t kWholeRowCacheBytes = 32 * 1024;
// The most shared memory a block may have on any target (sm_90 and sm_100, opting in): the largest copy
// sized at launch. Where the device allows less, its rows that do not fit are read from global memory.
constexpr int64_t kMostSharedBytesPerBlock = 227 * 1024;
// The most elements a register cache may hold per thread.
constexpr int64_t kMaxRegisterElements = 255;
// The most loops one stage's own directives may make (split and tile add them).
constexpr size_t kMaxStageLoops = 256;
// The block's size of a kernel whose loop is bound to grid.x when no `threads` directive gives it.
constexpr int64_t kGridThreads = 256;
// The bytes of each group of a vectorized grid-strided loop (one vector access).
constexpr int64_t kVectorGroupBytes = 16;

}  // namespace emmy::tile
