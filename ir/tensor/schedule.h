// A kernel's schedule (section 5 of the language) as the lowering reads it: the directives in order,
// each with its source place, every `param` already replaced by its value (its default or `-D`). The
// frontend builds it; Loop IR applies the fusion directives (inline, compute at, root) and Tile IR the
// rest. Directive words, stage names and axis names are kept as written so that diagnostics can
// quote them and `--emit schedule` can print them back.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "support/source.h"

namespace emmy::tensor {

#define EMMY_DIRECTIVE_KINDS(X)                                                                         \
  X(Split, "split") X(Tile, "tile") X(Reorder, "reorder") X(Fuse, "fuse") X(Bind, "bind")               \
  X(Inline, "inline") X(ComputeAt, "compute") X(Root, "root") X(Cache, "cache") X(Vectorize, "vectorize") \
  X(Unroll, "unroll") X(Pad, "pad") X(DoubleBuffer, "double_buffer") X(Threads, "threads") X(Mma, "mma") \
  X(Scan, "scan") X(IndexBits, "index_bits")

enum class DirectiveKind {
#define EMMY_ENUM_ENTRY(Kind, word) Kind,
  EMMY_DIRECTIVE_KINDS(EMMY_ENUM_ENTRY)
#undef EMMY_ENUM_ENTRY
};
const char* directiveWord(DirectiveKind kind);

// A name as written in a directive.
struct Name {
  std::string text;
  SourceLoc loc;
};

// One `V if SIZE <= B` of a param's default, or `V if T == f16` (`type` set: `size` names a type parameter),
// which each instance of a generic kernel decides (foldTypeCases, frontend/schedule.h).
enum class SizeComparison { Less, AtMost, Greater, AtLeast, Equal, NotEqual };
struct SizeCase {
  Name size;
  SizeComparison comparison = SizeComparison::AtMost;
  int64_t bound = 0;
  int64_t value = 0;
  SourceLoc loc;     // `V if SIZE <= B`
  std::string type;  // `f16` in `T == f16`; empty for a size
  bool holds(int64_t size) const;
};

// A param whose default depends on sizes, `param P in [..] = V if S <= B else W`, and that no `-D` set:
// the kernel is lowered once per value it takes and the launcher picks by the sizes
// (ir/tensor/launch_variants.h).
struct LaunchParam {
  std::string name;
  std::vector<int64_t> candidates;
  std::vector<SizeCase> cases;  // the first that holds gives the value
  int64_t otherwise = 0;        // where none holds
  int64_t valueAt(const std::map<std::string, int64_t>& sizes) const;
};

// A number as written in a directive, with its value (a `param` is replaced by its value).
struct Number {
  int64_t value = 0;
  SourceLoc loc;
  std::string param;  // the param it was written as (printed by name), or empty
  // Written as a LaunchParam: `value` is the one of the launch variant being lowered.
  std::shared_ptr<const LaunchParam> atLaunch = nullptr;
};

enum class HardwareScope { Block, Thread, Warp, Grid };

// Where `bind` sends a loop: block.x/y/z, thread.x/y/z, warp.x, or grid.x (every thread of the grid, a
// grid's size apart).
struct HardwareIndex {
  HardwareScope scope = HardwareScope::Block;
  int dimension = 0;  // 0, 1, 2 for x, y, z
  bool operator==(const HardwareIndex& other) const { return scope == other.scope && dimension == other.dimension; }
  bool operator<(const HardwareIndex& other) const {
    return scope != other.scope ? scope < other.scope : dimension < other.dimension;
  }
};
std::string hardwareIndexName(HardwareIndex index);

enum class CacheMemory { Shared, Registers };

// One directive. Which fields are set depends on the kind:
//   split S.a by F -> (ao, ai)                   stage, axes={a}, factors={F}, results={ao, ai}
//   tile S (a, b) by (Fa, Fb) -> (ao, bo, ai, bi) stage, axes, factors, results
//   reorder S (a, b, ...)                        stage, axes
//   fuse S (a, b) -> ab                          stage, axes, results={ab}
//   bind S.a to block.x [atomic]                 stage, axes={a}, target, atomic
//   inline S / root S / double_buffer S          stage
//   compute S at T.a                             stage, atStage, atAxis
//   cache S in shared|registers at T.a [-> N]    stage, memory, atStage, atAxis, results={N} or {}
//   vectorize S.a / unroll S.a                   stage, axes={a}
//   pad S by N                                   stage, factors={N}
//   mma S (a, b, c) by (WM, WN) stages N          stage, axes, factors={WM, WN, N}
//   scan S.t by (THREADS, ITEMS)                 stage, axes={t}, factors={THREADS, ITEMS}
//   index_bits S N                               stage, factors={N}
struct Directive {
  DirectiveKind kind = DirectiveKind::Split;
  SourceLoc loc;  // the whole directive
  Name stage;
  std::vector<Name> axes;
  std::vector<Number> factors;
  std::vector<Name> results;
  Name atStage, atAxis;
  CacheMemory memory = CacheMemory::Shared;
  HardwareIndex target;
  bool atomic = false;
  bool byDefault = false;   // added by the default policy for what the schedule leaves open
  bool fromCallee = false;  // brought by a call, from the callee's schedule (frontend/call_schedule.cpp)
};

// The directive in the syntax of section 5: numbers as values, or by name where they were written as
// (or made by the default policy from) a param.
std::string printDirective(const Directive& directive);

// A `param` line: `param NAME in [candidates] = default`.
struct ScheduleParam {
  std::string name;
  std::vector<int64_t> candidates;
  int64_t defaultValue = 0;
};
std::string printParam(const ScheduleParam& param);
std::string printParam(const LaunchParam& param);

// The name of a cache of `source` written without `-> NAME`: `S_shared` or `S_local`, then `_1`, `_2`, ...
// while `taken` says the name is in use.
std::string defaultCacheName(const std::string& source, CacheMemory memory,
                             const std::function<bool(const std::string&)>& taken);

}  // namespace emmy::tensor
