// Elaboration: AST to Tensor IR. Internal to the frontend; see frontend.h for the public API.
//
//   Elaborator           the program: loaded modules, kernel instances (cached), recursion checks
//   KernelElaboration    one kernel instance: signature, statements, names, stages (elaborate_kernel.cpp)
//     expressions        shared by both forms (elaborate_expr.cpp)
//     index form         range inference, bounds proofs, reductions (index_form.cpp)
//     whole-tensor form  views, reductions, @, softmax (whole_tensor.cpp)
//     kernel calls       expansion in place (kernel_call.cpp), the callee's schedule (call_schedule.cpp)
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "frontend/affine.h"
#include "frontend/ast.h"
#include "frontend/schedule.h"
#include "frontend/values.h"
#include "ir/tensor/nodes.h"
#include "support/diagnostics.h"

namespace emmy {

struct LoadedModule {
  std::unique_ptr<ast::Module> ast;
  std::filesystem::path directory;  // where its own imports are looked up first
  std::map<std::string, const LoadedModule*> imports;
  std::map<std::string, const ast::FnDef*> fns;
  std::map<std::string, const ast::KernelDef*> kernels;
};

using TypeArguments = std::map<std::string, DType>;
// Values of integer parameters (`STRIDE = 2`), by name.
using IntegerArguments = std::map<std::string, int64_t>;

class Elaborator {
public:
  Elaborator(Diagnostics& diagnostics, std::vector<std::filesystem::path> searchPath);

  const LoadedModule* loadFile(const std::filesystem::path& path, const std::string& displayPath);
  const LoadedModule* loadText(const std::string& displayPath, std::string text, const std::filesystem::path& directory);
  const LoadedModule* moduleOf(const ast::Module& module) const;
  // The files of the modules loaded so far (a file and its imports), sorted.
  std::vector<std::filesystem::path> loadedFiles() const;

  // The kernel instance for `typeArguments` (which must cover every type parameter) and
  // `integerArguments` (integer parameters not given take their defaults), elaborated once. Null after its
  // errors were reported (once). `use` is where it was called from, for errors there.
  const tensor::Kernel* instantiate(const LoadedModule& module, const ast::KernelDef& kernel,
                                    const TypeArguments& typeArguments, const IntegerArguments& integerArguments,
                                    const SourceLoc& use);

  Diagnostics& diagnostics() { return diagnostics_; }

  // Values for schedule params (`-D P=V`), set before anything is instantiated.
  void setParamValues(ParamValues values) { paramValues_ = std::move(values); }
  const ParamValues& paramValues() const { return paramValues_; }
  // Every param of the schedules resolved so far, by name; a callee's and its caller's share a name.
  const std::map<std::string, DeclaredParam>& declaredParams() const { return declaredParams_; }
  // The directives of `kernel`'s own schedule block (empty without one), resolved once for all its
  // instances and the calls of it.
  // The directives of the schedule of the instance of `kernel` with `typeArguments` and `integerArguments`.
  const std::vector<tensor::Directive>& ownSchedule(const LoadedModule& module, const ast::KernelDef& kernel,
                                                    const TypeArguments& typeArguments, const IntegerArguments& integerArguments);

private:
  const LoadedModule* load(const std::string& key, const std::string& displayPath, std::string text,
                           const std::filesystem::path& directory, const SourceLoc& importedFrom);
  void resolveImports(LoadedModule& module);
  void indexDefinitions(LoadedModule& module);
  void checkHostFunctionNames(const LoadedModule& module);
  bool checkScheduleTypes(const ast::Schedule& schedule, const ast::KernelDef& kernel);
  static bool schedulesOverlap(const ast::Schedule& a, const ast::Schedule& b);
  void checkFnRecursion(const LoadedModule& module);

  Diagnostics& diagnostics_;
  std::vector<std::filesystem::path> searchPath_;
  std::map<std::string, std::unique_ptr<LoadedModule>> modules_;  // by canonical path (or display path for text)
  std::vector<std::string> loading_;                               // import chain, for cycles
  std::map<std::string, std::optional<tensor::Kernel>> instances_;  // by key; nullopt: failed
  std::vector<std::string> instantiating_;                          // for recursive kernel calls
  ParamValues paramValues_;
  std::map<std::string, DeclaredParam> declaredParams_;
  std::map<const ast::Schedule*, std::vector<tensor::Directive>> ownSchedules_;  // null: no schedule
};

// Why `name` cannot name a tensor, index, size or parameter (it would clash in the generated code), or
// nullopt when it can.
std::optional<std::string> reservedNameProblem(const std::string& name);

// The name a statement's tensors and hoisted stages are built under.
struct Symbol {
  enum class Kind { Input, Output, Stage, Scalar, Size, TypeParam, IntegerParam };
  Kind kind;
  DType dtype = DType::F32;
  tensor::Shape shape;
  SourceLoc loc;
  bool defined = false;  // outputs: a statement has defined it
  int64_t value = 0;     // integer parameters: the instance's value
};

// An index of an index-form statement in scope.
struct IndexBinding {
  std::string name;
  tensor::Dim extent;
  SourceLoc loc;
};

// Where an expression is elaborated: which names it may see.
struct Scope {
  const LoadedModule* module = nullptr;
  bool kernelNames = true;                    // false inside an fn body: only its parameters
  std::map<std::string, TensorValue> fnArguments;
  std::vector<const ast::FnDef*> fnStack;     // fns being inlined
  bool indexForm = false;
  std::vector<IndexBinding> indices;          // innermost last
  std::vector<tensor::ExprPtr> guards;        // conditions of enclosing taken `where` branches
  std::vector<AffineForm> facts;              // what those guarantee

  const IndexBinding* findIndex(const std::string& name) const;
};

// The size of an expression as a tree (what its shared nodes stand for once copied), and its depth.
struct ExpressionExtent {
  uint64_t operations;  // at most kMaxInlinedOperations + 1
  uint64_t depth;
};

// The range each index of a statement gets from range inference, keyed by its defining identifier.
using IndexRanges = std::map<const ast::Ident*, tensor::Dim>;

class KernelElaboration {
public:
  KernelElaboration(Elaborator& program, const LoadedModule& module, const ast::KernelDef& def,
                    TypeArguments typeArguments, IntegerArguments integerArguments);
  // The kernel, or nullopt after reporting its errors.
  std::optional<tensor::Kernel> run();

  // ---- shared by the expression files ----
  TensorValue expr(const ast::Expr& e, Scope& scope);                // realized (no pending reduction)
  TensorValue exprOrPending(const ast::Expr& e, Scope& scope);       // may be a pending reduction
  TensorValue realize(const TensorValue& value);                     // stores a pending reduction
  // Stores `value` as a new stage `name` (axes i0, i1, ...; r0, ... for a reduction) and returns it.
  const tensor::Stage& materialize(const std::string& name, const TensorValue& value, const SourceLoc& loc);
  std::string freshStageName(const std::string& hint);               // TARGET__hint, then _1, _2 ...
  void addStage(tensor::Stage stage);
  [[noreturn]] void error(const SourceLoc& loc, std::string message);
  [[noreturn]] void unknownTensor(const ast::Name& name);  // a subscripted name that is not there (index_form.cpp)

private:
  bool declareSignature();  // false after errors, which were reported
  void declareTypeParam(const ast::TypeParam& param);
  void declareInput(const ast::Param& param);
  void declareOutput(const ast::Param& param);
  std::optional<DType> resolveDType(const ast::Ident& name);
  tensor::Shape resolveShape(const ast::TypeExpr& type, bool isOutput);
  // Where a dimension is written: an input's (new size names are declared), an output's, or in the body,
  // as the range of an index (`t[i < H - 2] = ...`) or a shape (`reshape(x, [N, H / 2])`; only known sizes).
  enum class DimPlace { Input, Output, Body };
  // A dimension written as an expression, its integer parameters replaced by their values and each
  // quotient that is combined further made a derived size of its own.
  tensor::SizePolynomial dimPolynomial(const ast::Expr& e, DimPlace place);
  // The same as a Dim, which must be at least 1 where it is a constant.
  tensor::Dim resolveDim(const ast::Expr& e, DimPlace place);
  void dropUnusedDerivedSizes();
  // `lhs / rhs` as a size when it is one: sizes with non-negative coefficients over a positive number
  // (`C / GROUPS`), which is then affine and may bound a reduction index; nullopt otherwise.
  std::optional<TensorValue> sizeQuotient(const TensorValue& lhs, const TensorValue& rhs);
  // `i / E` as 0 and `i % E` as i, for an index i whose range is E; nullopt for anything else.
  std::optional<TensorValue> indexByItsExtent(const ast::Binary& e, const TensorValue& lhs, const TensorValue& rhs,
                                              const Scope& scope);
  void declare(const std::string& name, Symbol symbol);
  void statement(const ast::Statement& s);
  void indexStatement(const ast::Statement& s);
  void wholeTensorStatement(const ast::Statement& s);
  void store(const ast::Ident& name, TensorValue value, const ast::Statement& s);
  void checkTarget(const ast::Ident& target);
  DType assignedType(const ast::Ident& target, DType valueType, bool literal, const SourceLoc& loc);

  // index form (index_form.cpp)
  IndexRanges inferRanges(const ast::Statement& s);
  TensorValue subscript(const ast::Subscript& e, Scope& scope);
  struct ReductionParts {
    tensor::Reduction reduction;
    tensor::ExprPtr body;  // in the accumulator type, over the scope's indices and the reduction's
    DType resultType;
    // A mean over an index whose bound is not its range: `reduction` sums, and the mean is that sum
    // divided by this count of its terms (an i64 over the scope's indices).
    tensor::ExprPtr divisor;
  };
  ReductionParts indexReductionParts(const ast::Reduction& e, Scope& scope);
  // The range of a reduction index written `k < BOUND`, and the guard `k < BOUND` of its body where the
  // range is wider than the bound (null where they are the same).
  struct BoundedRange {
    tensor::Dim extent;
    tensor::ExprPtr guard;
  };
  BoundedRange boundedRange(const ast::Ident& index, const ast::Expr& bound, Scope& scope);
  TensorValue indexReduction(const ast::Reduction& e, Scope& scope);  // hoisted into a stage of its own
  // `hint` names the stage (the reduction's own name when empty).
  TensorValue hoistReduction(const ReductionParts& parts, const ast::Reduction& e, Scope& scope,
                             const std::string& hint = "");
  TensorValue whereCall(const ast::Call& call, Scope& scope);

  // whole-tensor form (whole_tensor.cpp)
  std::optional<TensorValue> wholeTensorFunction(const ast::Call& call, Scope& scope);
  TensorValue matmul(const TensorValue& a, const TensorValue& b, const SourceLoc& loc);

  // calls (elaborate_expr.cpp, kernel_call.cpp)
  struct Callee {
    const LoadedModule* module = nullptr;  // with fn or kernel
    const ast::FnDef* fn = nullptr;
    const ast::KernelDef* kernel = nullptr;
  };
  // A fn or kernel of the scope's module or an imported one; neither for builtins. Reports calls of
  // local names and unknown modules or qualified names.
  Callee resolveCallee(const ast::Call& call, const Scope& scope);
  TensorValue name(const ast::Name& e, Scope& scope);
  TensorValue call(const ast::Call& call, Scope& scope, bool allowPending);
  TensorValue inlineFn(const LoadedModule& module, const ast::FnDef& fn, const ast::Call& call, Scope& scope);
  ExpressionExtent extentOf(const tensor::ExprPtr& e);  // memoized in `extents`, so linear in the DAG
  std::vector<TensorValue> callKernel(const LoadedModule& module, const ast::KernelDef& callee, const ast::Call& call,
                                      Scope& scope, const std::vector<std::string>& resultNames);
  std::vector<const ast::Expr*> matchArguments(const std::string& callee, const std::vector<std::string>& params,
                                               size_t required, const ast::Call& call);
  // PREFIX__NAME for a tensor a call generates; an error at `call` when an earlier statement already
  // generated that name (the naming rule can make two equal).
  std::string callStageName(const std::string& prefix, const std::string& name, const SourceLoc& call);

  // calls' schedules (call_schedule.cpp)
  // The directives a kernel call brings: `instance`'s schedule under the caller's names (`renamed`, by
  // the callee's), its caches named PREFIX__NAME.
  // `sizes`: the caller's dims the callee's sizes take at this call.
  std::vector<tensor::Directive> calleeDirectives(const tensor::Kernel& instance, const std::string& prefix,
                                                  const std::map<std::string, std::string>& renamed,
                                                  const std::map<std::string, tensor::Dim>& sizes);
  // The kernel's schedule: the directives of its calls, each call's applied where its results are
  // computed in the caller, then `own`, which wins over them (docs/call_schedules.md).
  std::vector<tensor::Directive> composeSchedule(const std::vector<tensor::Directive>& own) const;
  struct CalleeSchedule {
    std::vector<std::string> results;  // the call's results, by their names in the caller
    std::vector<tensor::Directive> directives;
  };
  std::vector<CalleeSchedule> calleeSchedules;  // in the order of the calls
  std::map<std::string, std::pair<std::string, SourceLoc>> callNames;  // generated name -> result name, call

public:
  Elaborator& program;
  const LoadedModule& module;
  const ast::KernelDef& def;
  Diagnostics& diagnostics;
  TypeArguments typeArguments;
  IntegerArguments integerArguments;
  tensor::Kernel kernel;
  std::map<std::string, Symbol> symbols;
  std::set<std::string> poisoned;  // targets of failed statements: their uses fail silently
  std::set<std::string> sizesStandingAlone;  // sizes that are a dimension of their own of some input

  // The statement being elaborated.
  std::string target;
  int callsInStatement = 0;
  const IndexRanges* ranges = nullptr;
  // extentOf's results, holding their expressions so that the addresses stay theirs.
  std::unordered_map<const tensor::Expr*, std::pair<tensor::ExprPtr, ExpressionExtent>> extents;
  std::vector<tensor::ExprPtr> measuringIndex;  // where inlineFn measures its results
};

// The type of reducing values of `dtype` with `op` (bool sums count in i64; the mean of integers is an
// error at `loc`).
DType reductionResultType(tensor::ReduceOp op, DType dtype, const SourceLoc& loc, Diagnostics& diagnostics);

// Every name a user may call without a module prefix, for suggestions.
std::vector<std::string> builtinFunctionNames();

}  // namespace emmy
