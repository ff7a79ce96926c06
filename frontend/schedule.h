// Schedules from the AST to the lowering's form (ir/tensor/schedule.h): each `param` takes its value
// (its default, or the value `-D P=V` gives it), every number written as a param name is replaced by
// that value, and the words of `cache ... in MEMORY` and `bind ... to SCOPE.DIM` are checked. What the
// directives mean for a kernel's stages and loops is checked by the lowering, which knows them.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "frontend/ast.h"
#include "ir/tensor/schedule.h"
#include "support/diagnostics.h"
#include "support/dtype.h"

namespace emmy {

// `-D P=V` values from the command line, by param name.
using ParamValues = std::map<std::string, int64_t>;

// A `param` as declared: its candidates in the order written and its default (what `emmy tune` searches).
// Empty candidates when the declaration has an error (already reported).
struct DeclaredParam {
  std::vector<int64_t> candidates;
  int64_t defaultValue = 0;
};

// The directives of `schedule` with params replaced. Errors go to `diagnostics`; a directive with an
// error is left out. `declared` collects the params the schedule declares, by name.
// `typeParams`: the names of the type parameters of the kernel it schedules (which `V if T == f16` may test).
std::vector<tensor::Directive> resolveSchedule(const ast::Schedule& schedule, const ParamValues& defines,
                                               const std::vector<std::string>& typeParams,
                                               std::map<std::string, DeclaredParam>& declared,
                                               Diagnostics& diagnostics);

// `directives` for one instance of a generic kernel: each param's cases that test a type parameter
// (`8 if T == f16 else ...`) decided by the instance's types; a param left with no case is a number.
std::vector<tensor::Directive> foldTypeCases(std::vector<tensor::Directive> directives,
                                             const std::map<std::string, DType>& typeArguments);

}  // namespace emmy
