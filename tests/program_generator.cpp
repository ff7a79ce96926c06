#include "program_generator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "random_schedules.h"
#include "support/dtype.h"

namespace emmy::testing {

namespace {

// What a tensor's dims are: [R, C], [R], [C], [R, 1], [C, C], and a matrix product's [R, K] and [K, C]
// (R rows, C columns, K the inner size), which only the product reads.
enum class Shape { Matrix, Rows, Cols, RowsKeep, Square, RowsInner, InnerCols };

struct Tensor {
  std::string name;
  DType dtype;
  Shape shape;
  bool input;
};

struct Expr {
  std::string text;
  DType dtype;
  double magnitude;  // a bound of |value| (floats; integers wrap)
  bool exact;        // the reference and the generated code compute it bit for bit alike
  bool literal = false;
};

enum class Kind { Float, Int, Bool };

Kind kindOf(DType dtype) { return isFloat(dtype) ? Kind::Float : isInteger(dtype) ? Kind::Int : Kind::Bool; }

// Where an index-form expression stands: the loop variables over the rows and over the columns, if any.
struct Scope {
  std::optional<std::string> row, col;
  bool canReduce = true;
  std::set<std::string>* anchored = nullptr;  // the indices that stood alone as a subscript so far
  std::set<std::string> visible;              // index names in scope
};

const std::vector<DType> kAllDtypes{DType::F16, DType::BF16, DType::F32, DType::F64,
                                    DType::I8,  DType::I32,  DType::I64, DType::Bool};
const std::vector<DType> kFloatDtypes{DType::F16, DType::BF16, DType::F32, DType::F64};
const std::vector<DType> kIntDtypes{DType::I8, DType::I32, DType::I64};
const std::vector<DType> kCallDtypes{DType::F16, DType::BF16, DType::F32};

// Never a user name: the language's keywords and directive words, dtypes, builtins and the stdlib's
// module names (a local name would shadow a builtin that the generator calls).
const std::set<std::string> kNotNames{
    "import", "fn", "kernel", "schedule", "and", "or", "not", "true", "false", "param", "in", "to", "at", "by",
    "split", "tile", "reorder", "fuse", "bind", "inline", "compute", "root", "cache", "vectorize", "unroll",
    "pad", "double_buffer", "atomic", "f16", "bf16", "f32", "f64", "i8", "i32", "i64", "bool", "inf", "exp",
    "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sin", "cos", "tanh", "erf", "sigmoid", "relu", "gelu",
    "silu", "floor", "ceil", "min", "max", "pow", "clamp", "where", "sum", "prod", "mean", "argmax", "argmin",
    "cumsum", "cumprod", "logsumexp", "transpose", "permute", "reshape", "broadcast_to", "unsqueeze",
    "squeeze", "softmax", "log_softmax", "nn", "linalg", "axis", "keepdim", "block", "thread", "warp",
    "shared", "registers"};

// What random_schedules.h appends to a loop's name to name the loops it makes.
const std::vector<const char*> kLoopSuffixes{"o", "i", "t", "r", "_step", "_lane", "_row", "_block", "_out", "_in"};

const std::vector<std::string> kPlainNames{
    "a", "b", "c", "e", "f", "g", "h", "p", "q", "s", "t", "u", "v", "w", "x", "z", "acc2", "tmp", "val", "res",
    "alpha", "beta", "gamma", "scale", "bias", "mask", "prev", "cur", "lhs", "rhs", "Y", "X", "Q", "total",
    "hidden", "feat", "score", "logits", "weight", "mu", "sigma", "delta", "lo", "hi"};
// C++ keywords and types, CUDA builtins and types, C library functions, and the generated code's own
// names (issue 12, section 1).
const std::vector<std::string> kHostileNames{
    "int", "float", "double", "char", "new", "delete", "class", "struct", "do", "while", "for", "if", "else",
    "return", "const", "static", "void", "auto", "unsigned", "long", "short", "switch", "case", "default",
    "break", "namespace", "template", "typename", "this", "operator", "union", "enum", "extern", "sizeof",
    "volatile", "stream", "size_t", "int64_t", "int32_t", "uint8_t", "half", "dim3", "blockIdx", "threadIdx",
    "blockDim", "gridDim", "warpSize", "INFINITY", "NAN", "row", "element", "part", "kk", "jj", "m_acc",
    "m_acc_partials", "k_k0", "emmy_max", "emmy_min", "expf", "sqrtf", "logf", "fmaxf", "printf", "malloc",
    "main", "std", "cudaStream_t", "cudaGetLastError", "cudaError_t", "nullptr", "NULL", "lane", "tid",
    "C_acc", "y_acc", "x_shared", "x_local", "As", "y_lanes"};
const std::vector<std::string> kPlainIndices{"n", "d", "i", "j", "r", "col", "ix", "jy", "k", "l", "m", "o", "pos"};

class Generator {
public:
  Generator(uint64_t seed, const GeneratorOptions& options) : random_(seed), options_(options) {
    program_.seed = seed;
  }

  GeneratedProgram generate();

private:
  // ---- names ----
  bool free(const std::string& name) const {
    return !kNotNames.count(name) && !used_.count(name) && !indices_.count(name);
  }
  // A name not in use; an index name may be one that other statements use as an index.
  std::string draw(const std::vector<std::string>& plain, bool indexName = false) {
    for (int attempt = 0;; ++attempt) {
      std::string name;
      if (options_.hostileNames && random_() % 3 == 0) {
        if (random_() % 4 == 0 && !used_.empty()) {  // shaped after a name in use
          std::vector<std::string> inUse(used_.begin(), used_.end());
          name = pick(random_, inUse) +
                 pick<std::string>(random_, {"_acc", "_shared", "_local", "_partials", "_k0", "_lanes", "_1", "_t"});
        } else {
          name = pick(random_, kHostileNames);
        }
      } else {
        name = pick(random_, plain);
      }
      if (attempt > 30) name += fmt::format("{}", attempt);
      if (free(name) || (indexName && !kNotNames.count(name) && !used_.count(name))) return name;
    }
  }
  std::string fresh() {
    std::string name = draw(kPlainNames);
    used_.insert(name);
    return name;
  }
  // An index name: not a kernel-level name and not one visible around it.
  std::string freshIndex(const std::set<std::string>& visible) {
    for (;;) {
      std::string name = draw(kPlainIndices, true);
      if (visible.count(name)) continue;
      // The schedules name loops NAME + a suffix ("o" + "r" is the keyword `or`; "d" + "o" the C++ `do`).
      auto refused = [&](const char* suffix) {
        return kNotNames.count(name + suffix) ||
               (!options_.hostileNames &&
                std::find(kHostileNames.begin(), kHostileNames.end(), name + suffix) != kHostileNames.end());
      };
      if (std::any_of(kLoopSuffixes.begin(), kLoopSuffixes.end(), refused)) continue;
      indices_.insert(name);
      return name;
    }
  }

  // ---- expressions ----
  Expr leaf(Scope& scope, Kind want);
  Expr expr(Scope& scope, Kind want, int depth);
  Expr floatExpr(Scope& scope, int depth);
  Expr intExpr(Scope& scope, int depth);
  Expr boolExpr(Scope& scope, int depth);
  Expr reduction(Scope& scope, Kind want, int depth);
  Expr bounded(const Expr& e, double limit = 30) {
    if (kindOf(e.dtype) != Kind::Float || e.magnitude <= limit) return e;
    return Expr{"tanh(" + e.text + ")", e.dtype, 1, false};
  }
  Expr read(const Tensor& tensor, Scope& scope);
  Expr binary(const std::string& op, const Expr& a, const Expr& b, double magnitude);
  Expr fnCall(Scope& scope, int depth);

  Expr wholeExpr(Shape shape, Kind want, int depth);
  Expr wholeLeaf(Shape shape, Kind want);
  std::optional<Expr> kernelCall();

  // ---- statements ----
  // Defines a stage of `shape` (an output when `output`), in index form with `indices` (the
  // statement's loop names: rows then columns) when given, else in a random form.
  // `operand`, when given, is combined with the random expression (a core's stage reads the stages
  // before it).
  Tensor statement(Shape shape, bool output, const std::vector<std::string>& indices = {},
                   const std::string& forcedName = "", const std::function<Expr(Scope&)>& operand = {});
  std::string dims(Shape shape) const;
  std::string castTo(DType dtype, const Expr& e) const { return fmt::format("{}({})", dtypeName(dtype), e.text); }
  DType outputDtype(const Expr& e);
  std::vector<const Tensor*> readable(Shape shape, Kind want) const;

  // Does a statement's text reduce (index form `sum[k](..)`, or whole-tensor form with an axis)?
  static bool reduces(const std::string& text) {
    static const std::regex reduction(R"(\b(sum|prod|max|min|mean)\[|axis=)");
    return std::regex_search(text, reduction);
  }

  // ---- schedules ----
  std::string genericDirectives();
  // Later statements do not read these stages.
  void hide(const std::vector<std::string>& names) {
    std::erase_if(stages_, [&](const Tensor& t) { return std::find(names.begin(), names.end(), t.name) != names.end(); });
  }

  std::mt19937_64 random_;
  GeneratorOptions options_;
  GeneratedProgram program_;
  std::set<std::string> used_;     // kernel-level names: sizes, tensors, scalars, fns
  std::set<std::string> indices_;  // every index name used, kept apart from those
  std::string kernelName_, rows_, cols_, inner_;
  std::vector<Tensor> inputs_, stages_, outputs_;
  struct Scalar {
    std::string name;
    DType dtype;
    double value;  // 0.5 for a float without a default, which the test's inputs give it
    bool hasDefault;
  };
  std::vector<Scalar> scalars_;
  struct Fn {
    std::string name;
    int arity;
  };
  std::vector<Fn> fns_;
  std::vector<std::string> fnDefinitions_, body_;
  struct StageLoops {
    std::string name;
    std::vector<std::string> loops;
  };
  std::vector<StageLoops> loops_;
  bool importNn_ = false, importLinalg_ = false;
  int calls_ = 0;
  bool wholeMatrix_ = false;  // the whole-tensor expression being drawn has a matrix operand
  bool withoutReductions_ = false;  // the index-form statement being drawn holds no reduction
};

std::string Generator::dims(Shape shape) const {
  switch (shape) {
    case Shape::Matrix: return fmt::format("[{}, {}]", rows_, cols_);
    case Shape::Rows: return fmt::format("[{}]", rows_);
    case Shape::Cols: return fmt::format("[{}]", cols_);
    case Shape::RowsKeep: return fmt::format("[{}, 1]", rows_);
    case Shape::Square: return fmt::format("[{}, {}]", cols_, cols_);
    case Shape::RowsInner: return fmt::format("[{}, {}]", rows_, inner_);
    case Shape::InnerCols: return fmt::format("[{}, {}]", inner_, cols_);
  }
  return "";
}

std::vector<const Tensor*> Generator::readable(Shape shape, Kind want) const {
  std::vector<const Tensor*> found;
  for (const std::vector<Tensor>* list : {&inputs_, &stages_})
    for (const Tensor& tensor : *list)
      if (tensor.shape == shape && kindOf(tensor.dtype) == want) found.push_back(&tensor);
  return found;
}

Expr Generator::read(const Tensor& tensor, Scope& scope) {
  const std::string& n = *scope.row;
  const std::string& d = *scope.col;
  std::string subscripts;
  switch (tensor.shape) {
    case Shape::Matrix:
      // Affine reads of inputs: guarded by `where`, through `pad`, mirrored.
      if (tensor.input && random_() % 4 == 0) {
        double fill = pick<double>(random_, {0.0, 1.0, -2.0});
        std::string fillText = kindOf(tensor.dtype) == Kind::Float ? fmt::format("{:.1f}", fill) : fmt::format("{}", int(fill));
        if (kindOf(tensor.dtype) == Kind::Bool) fillText = "false";
        switch (random_() % 5) {
          case 0:
            return Expr{fmt::format("where({} + 1 < {}, {}[{}, {} + 1], {})", d, cols_, tensor.name, n, d, fillText),
                        tensor.dtype, 2, true};
          case 1:
            return Expr{fmt::format("where({} > 0 and {} > 0, {}[{} - 1, {} - 1], {})", n, d, tensor.name, n, d, fillText),
                        tensor.dtype, 2, true};
          case 2:
            return Expr{fmt::format("pad({}, {})[{}, {} - 1]", tensor.name, fillText, n, d), tensor.dtype, 2, true};
          case 3:
            return Expr{fmt::format("pad({}, {})[{} + 1, 2 * {}]", tensor.name, fillText, n, d), tensor.dtype, 2, true};
          default:
            subscripts = fmt::format("{} - 1 - {}, {}", rows_, n, d);
            scope.anchored->insert(d);
        }
      } else {
        subscripts = n + ", " + d;
        scope.anchored->insert(n);
        scope.anchored->insert(d);
      }
      break;
    case Shape::Rows: subscripts = n; scope.anchored->insert(n); break;
    case Shape::Cols: subscripts = d; scope.anchored->insert(d); break;
    case Shape::RowsKeep: subscripts = n + ", 0"; scope.anchored->insert(n); break;
    default: subscripts = d + ", " + d; scope.anchored->insert(d); break;
  }
  return Expr{fmt::format("{}[{}]", tensor.name, subscripts), tensor.dtype, 1, true};
}

Expr Generator::leaf(Scope& scope, Kind want) {
  std::vector<const Tensor*> candidates;
  for (Shape shape : {Shape::Matrix, Shape::Rows, Shape::Cols, Shape::RowsKeep}) {
    bool fits = shape == Shape::Matrix ? scope.row && scope.col
              : shape == Shape::Cols   ? bool(scope.col)
                                       : bool(scope.row);
    if (!fits) continue;
    for (const Tensor* tensor : readable(shape, want)) candidates.push_back(tensor);
  }
  int choice = random_() % 10;
  if (!candidates.empty() && choice < 7) return read(*pick(random_, candidates), scope);
  if (want == Kind::Bool) {
    if (!candidates.empty()) return read(*pick(random_, candidates), scope);
    return Expr{coin(random_) ? "true" : "false", DType::Bool, 1, true, true};
  }
  if (choice == 7 && !scalars_.empty()) {
    const Scalar& scalar = pick(random_, scalars_);
    if (kindOf(scalar.dtype) == want) return Expr{scalar.name, scalar.dtype, std::abs(scalar.value) + 1, true};
  }
  if (choice == 8 && want == Kind::Int) {  // an index or a size as an i64 value
    std::vector<std::string> values;
    if (scope.row) values.insert(values.end(), {*scope.row, rows_});
    if (scope.col) values.insert(values.end(), {*scope.col, cols_});
    if (!values.empty()) return Expr{pick(random_, values), DType::I64, 100, true};
  }
  if (choice == 8 && want == Kind::Float && scope.col)
    return Expr{fmt::format("f32({}) / f32({})", *scope.col, cols_), DType::F32, 1, false};
  if (want == Kind::Int) return Expr{fmt::format("{}", int(random_() % 7) - 2), DType::I64, 5, true, true};
  return Expr{pick<std::string>(random_, {"0.5", "2.0", "0.25", "1.5", "3.0", "1e-2", "0.1"}), DType::F32, 3, true, true};
}

// PyTorch's promotion with the spec's rule for literals.
Expr Generator::binary(const std::string& op, const Expr& a, const Expr& b, double magnitude) {
  DType dtype;
  // An expression of literals alone is folded in f64: it acts as a float literal.
  if (a.literal && b.literal) dtype = DType::F32;
  else if (a.literal) dtype = kindOf(a.dtype) == Kind::Float && kindOf(b.dtype) != Kind::Float ? DType::F32 : b.dtype;
  else if (b.literal) dtype = kindOf(b.dtype) == Kind::Float && kindOf(a.dtype) != Kind::Float ? DType::F32 : a.dtype;
  else dtype = promote(a.dtype, b.dtype);
  bool arithmetic = op == "+" || op == "-" || op == "*" || op == "/" || op == "%";
  if (arithmetic && dtype == DType::Bool) dtype = DType::I64;  // bool in arithmetic is an integer
  return Expr{fmt::format("({} {} {})", a.text, op, b.text), dtype, magnitude, a.exact && b.exact && kindOf(dtype) != Kind::Float,
              a.literal && b.literal};
}

Expr Generator::expr(Scope& scope, Kind want, int depth) {
  switch (want) {
    case Kind::Float: return floatExpr(scope, depth);
    case Kind::Int: return intExpr(scope, depth);
    default: return boolExpr(scope, depth);
  }
}

Expr Generator::fnCall(Scope& scope, int depth) {
  const Fn& fn = pick(random_, fns_);
  std::string args;
  for (int k = 0; k < fn.arity; ++k) {
    Expr arg = bounded(floatExpr(scope, depth - 1), 1);
    args += (k ? ", " : "") + arg.text;
  }
  // Its parameters take the arguments' dtypes; the body keeps |value| under 3 for |arguments| <= 1.
  return Expr{fmt::format("{}({})", fn.name, args), DType::F32, 3, false};
}

Expr Generator::floatExpr(Scope& scope, int depth) {
  if (depth <= 0) {
    // Mostly floats; integers and bools promote (an integer read is exact, and small).
    if (random_() % 5 == 0) {
      std::set<std::string> anchored = *scope.anchored;
      Expr e = leaf(scope, random_() % 4 == 0 ? Kind::Bool : Kind::Int);
      if (e.dtype == DType::Bool) return Expr{"f32(" + e.text + ")", DType::F32, 1, true};
      if (e.literal || e.magnitude > 100) {
        *scope.anchored = anchored;  // what is not used anchors nothing
        return leaf(scope, Kind::Float);
      }
      DType to = pick(random_, kFloatDtypes);
      return Expr{castTo(to, e), to, e.magnitude, true};
    }
    return leaf(scope, Kind::Float);
  }
  auto sub = [&] { return floatExpr(scope, depth - 1 - int(random_() % 2)); };
  switch (random_() % 16) {
    case 0: case 1: {
      Expr a = sub(), b = sub();
      return bounded(binary(pick<std::string>(random_, {"+", "-"}), a, b, a.magnitude + b.magnitude));
    }
    case 2: {
      Expr a = sub(), b = sub();
      return bounded(binary("*", a, b, a.magnitude * b.magnitude));
    }
    case 3: {
      Expr a = sub(), b = sub();
      Expr denominator{"(1 + abs(" + b.text + "))", b.dtype, 1, false};
      return binary("/", a, denominator, a.magnitude);
    }
    case 4: {  // builtins of one operand that stay bounded
      Expr a = sub();
      std::string f = pick<std::string>(random_, {"sin", "cos", "tanh", "erf", "sigmoid"});
      return Expr{f + "(" + a.text + ")", a.dtype, 1, false};
    }
    case 5: {
      Expr a = sub();
      std::string f = pick<std::string>(random_, {"relu", "gelu", "silu", "abs", "-"});
      return Expr{f + "(" + a.text + ")", a.dtype, a.magnitude + 1, a.exact && (f == "abs" || f == "-" || f == "relu")};
    }
    case 6: {
      Expr a = bounded(sub(), 4);
      std::string f = pick<std::string>(random_, {"exp", "exp2"});
      return Expr{f + "(" + a.text + ")", a.dtype, std::exp(a.magnitude) + 1, false};
    }
    case 7: {
      Expr a = sub();
      switch (random_() % 4) {
        case 0: return Expr{"log(abs(" + a.text + ") + 1)", a.dtype, std::log(a.magnitude + 1) + 1, false};
        case 1: return Expr{"log2(abs(" + a.text + ") + 2)", a.dtype, std::log2(a.magnitude + 2) + 1, false};
        case 2: return Expr{"sqrt(abs(" + a.text + "))", a.dtype, std::sqrt(a.magnitude) + 1, false};
        default: return Expr{"rsqrt(abs(" + a.text + ") + 1)", a.dtype, 1, false};
      }
    }
    case 8: {  // discontinuous: only of what both compute exactly
      Expr a = leaf(scope, Kind::Float);
      if (!a.exact) return a;
      switch (random_() % 3) {
        case 0: return Expr{"floor(" + a.text + " * 4)", a.dtype, a.magnitude * 4 + 1, true};
        case 1: return Expr{"ceil(" + a.text + " * 2)", a.dtype, a.magnitude * 2 + 1, true};
        default: return Expr{"(" + a.text + " % 0.5)", a.dtype, 1, false};
      }
    }
    case 9: {
      Expr a = sub(), b = sub();
      Expr e = binary(",", a, b, std::max(a.magnitude, b.magnitude));
      return Expr{pick<std::string>(random_, {"min", "max"}) + e.text, e.dtype, e.magnitude, false, e.literal};
    }
    case 10: {
      Expr a = bounded(sub(), 4);
      std::string exponent = pick<std::string>(random_, {"0.5", "2", "-1", "1.5", "3"});
      return Expr{fmt::format("pow(abs({}) + 1, {})", a.text, exponent), a.dtype, std::pow(a.magnitude + 1, 3), false};
    }
    case 11: {
      Expr a = sub();
      return Expr{"clamp(" + a.text + ", -0.75, 0.5)", a.dtype, 1, false};
    }
    case 12: {
      Expr c = boolExpr(scope, depth - 1), a = sub(), b = sub();
      Expr e = binary(",", a, b, std::max(a.magnitude, b.magnitude));
      return Expr{fmt::format("where({}, {}, {})", c.text, a.text, b.text), e.dtype, e.magnitude, false};
    }
    case 13: {  // a cast between floats
      Expr a = bounded(sub(), 8);
      DType to = pick(random_, kFloatDtypes);
      return Expr{castTo(to, a), to, a.magnitude * 1.01, false};
    }
    case 14:
      if (!fns_.empty()) return fnCall(scope, depth);
      [[fallthrough]];
    default:
      if (scope.canReduce) return bounded(reduction(scope, Kind::Float, depth));
      return sub();
  }
}

Expr Generator::intExpr(Scope& scope, int depth) {
  if (depth <= 0) return leaf(scope, Kind::Int);
  auto sub = [&] { return intExpr(scope, depth - 1 - int(random_() % 2)); };
  switch (random_() % 9) {
    case 0: case 1: {
      Expr a = sub(), b = sub();
      return binary(pick<std::string>(random_, {"+", "-", "*"}), a, b, a.magnitude * b.magnitude + 1);
    }
    case 2: {  // truncating division and remainder, by zero included
      Expr a = sub(), b = sub();
      return binary(pick<std::string>(random_, {"/", "%"}), a, b, a.magnitude);
    }
    case 3: {
      Expr a = sub();
      return Expr{pick<std::string>(random_, {"abs", "-", "relu"}) + "(" + a.text + ")", a.dtype, a.magnitude, true, a.literal};
    }
    case 4: {
      Expr a = sub(), b = sub();
      Expr e = binary(",", a, b, std::max(a.magnitude, b.magnitude));
      return Expr{pick<std::string>(random_, {"min", "max"}) + e.text, e.dtype, e.magnitude, true, e.literal};
    }
    case 5: {  // wrapping: large products in a narrow type
      Expr a = sub();
      DType to = pick(random_, kIntDtypes);
      std::string factor = to == DType::I8 ? pick<std::string>(random_, {"100", "3"})
                                           : pick<std::string>(random_, {"1000000", "100", "65537", "3"});
      return Expr{fmt::format("({}({}) * {} * {})", dtypeName(to), a.text, factor, factor), to, 1e12, true};
    }
    case 6: {  // from a float both compute exactly, and from a bool
      std::set<std::string> anchored = *scope.anchored;
      Expr a = leaf(scope, Kind::Float);
      DType to = pick(random_, kIntDtypes);
      if (a.exact && a.magnitude < 10) return Expr{fmt::format("{}({} * 8)", dtypeName(to), a.text), to, 80, true};
      *scope.anchored = anchored;
      Expr c = boolExpr(scope, depth - 1);
      return Expr{fmt::format("{}({})", dtypeName(to), c.text), to, 1, true};
    }
    case 7: {
      Expr c = boolExpr(scope, depth - 1), a = sub(), b = sub();
      Expr e = binary(",", a, b, std::max(a.magnitude, b.magnitude));
      return Expr{fmt::format("where({}, {}, {})", c.text, a.text, b.text), e.dtype, e.magnitude, true};
    }
    default:
      if (scope.canReduce) return reduction(scope, Kind::Int, depth);
      return sub();
  }
}

Expr Generator::boolExpr(Scope& scope, int depth) {
  if (depth <= 0 || random_() % 3 == 0) {
    // Comparisons of exact values only: a rounding difference must not flip them.
    if (random_() % 5 == 0) return leaf(scope, Kind::Bool);
    std::set<std::string> anchored = *scope.anchored;
    Expr a = coin(random_) ? leaf(scope, Kind::Float) : intExpr(scope, std::max(0, depth - 1));
    if (!a.exact) {
      *scope.anchored = anchored;
      a = leaf(scope, Kind::Int);
    }
    std::string op = pick<std::string>(random_, {"<", "<=", ">", ">=", "==", "!="});
    std::string against = kindOf(a.dtype) == Kind::Float ? pick<std::string>(random_, {"0.25", "0", "-0.5"})
                                                         : pick<std::string>(random_, {"0", "1", "-3"});
    return Expr{fmt::format("({} {} {})", a.text, op, against), DType::Bool, 1, true};
  }
  switch (random_() % 3) {
    case 0: {
      Expr a = boolExpr(scope, depth - 1), b = boolExpr(scope, depth - 1);
      return Expr{fmt::format("({} {} {})", a.text, pick<std::string>(random_, {"and", "or"}), b.text), DType::Bool, 1, true};
    }
    case 1: {
      Expr a = boolExpr(scope, depth - 1);
      return Expr{"(not " + a.text + ")", DType::Bool, 1, true};
    }
    default: {
      Expr a = intExpr(scope, depth - 1), b = intExpr(scope, depth - 1);
      return Expr{fmt::format("({} {} {})", a.text, pick<std::string>(random_, {"<", "==", ">="}), b.text), DType::Bool, 1, true};
    }
  }
}

// A reduction inside `scope`: over the columns of a row, the rows of a column, both (several indices), a
// prefix of the row (`k < d + 1`) or a window through `pad` (`k < 3`).
Expr Generator::reduction(Scope& scope, Kind want, int depth) {
  std::string op = want == Kind::Float ? pick<std::string>(random_, {"sum", "max", "min", "prod", "mean", "sum"})
                                       : pick<std::string>(random_, {"sum", "max", "min", "prod", "argmax", "argmin"});
  if (!options_.argmax && (op == "argmax" || op == "argmin")) op = "max";
  Scope inner = scope;
  inner.canReduce = false;
  std::set<std::string> anchored;
  inner.anchored = &anchored;
  std::vector<std::string> indices;
  std::string header;
  int form = random_() % 6;
  if (!options_.boundedReductions) form = 0;
  if (scope.row && scope.col && form == 4) {  // a prefix of the row
    std::string k = freshIndex(scope.visible);
    inner.col = k;
    inner.visible.insert(k);
    header = fmt::format("{} < {} + 1", k, *scope.col);
    anchored.insert(k);
  } else if (scope.row && scope.col && form == 5 && want == Kind::Float) {  // a window
    std::vector<const Tensor*> sources;
    for (const Tensor& input : inputs_)
      if (input.shape == Shape::Matrix && kindOf(input.dtype) == Kind::Float) sources.push_back(&input);
    if (!sources.empty()) {
      std::string k = freshIndex(scope.visible);
      const Tensor& source = *pick(random_, sources);
      op = pick<std::string>(random_, {"sum", "max", "min"});
      return Expr{fmt::format("{}[{} < 3](pad({}, 0.0)[{}, {} + {} - 1])", op, k, source.name, *scope.row, *scope.col, k),
                  source.dtype, 3, false};
    }
  }
  if (header.empty()) {
    int axes = !scope.row && !scope.col ? 2 : random_() % 5 == 0 ? 2 : 1;
    bool overCols = axes == 2 || !scope.col || (scope.row && coin(random_));
    if (axes == 2 || overCols) {
      std::string k = freshIndex(inner.visible);
      inner.visible.insert(k);
      inner.col = k;
      indices.push_back(k);
    }
    if (axes == 2 || !overCols) {
      std::string k = freshIndex(inner.visible);
      inner.visible.insert(k);
      inner.row = k;
      indices.insert(indices.begin(), k);
    }
    for (const std::string& index : indices) header += (header.empty() ? "" : ", ") + index;
  }
  bool positional = op == "argmax" || op == "argmin";
  Kind bodyKind = op == "mean" || (positional && coin(random_)) ? Kind::Float : want;
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::set<std::string> before = anchored;
    Expr body = positional ? leaf(inner, bodyKind) : expr(inner, bodyKind, depth - 1);
    if (body.literal) continue;
    bool anchoredAll = std::all_of(indices.begin(), indices.end(), [&](const std::string& k) { return anchored.count(k); });
    if (!anchoredAll || (positional && !body.exact)) {
      anchored = before;
      continue;
    }
    for (const std::string& index : anchored)  // the enclosing indices read alone inside
      if (scope.visible.count(index)) scope.anchored->insert(index);
    if (body.dtype == DType::Bool) body = Expr{"i32(" + body.text + ")", DType::I32, 1, true};
    if (op == "prod" && bodyKind == Kind::Float) body = Expr{"(1 + 0.01 * tanh(" + body.text + "))", body.dtype, 1.01, false};
    double count = indices.size() == 2 ? 1200 : 100;
    double magnitude = op == "sum" ? body.magnitude * count : op == "prod" ? 3 : body.magnitude;
    DType dtype = positional ? DType::I64 : body.dtype;
    return Expr{fmt::format("{}[{}]({})", op, header, body.text), dtype, magnitude, kindOf(dtype) != Kind::Float};
  }
  return leaf(scope, want);
}

// ---- whole-tensor form ----

Expr Generator::wholeLeaf(Shape shape, Kind want) {
  std::vector<std::pair<const Tensor*, bool>> candidates;  // the tensor, and whether it needs unsqueeze
  std::vector<Shape> fits;
  if (shape == Shape::Matrix) fits = {Shape::Matrix, Shape::Cols, Shape::RowsKeep, Shape::Rows};
  else fits = {shape};
  for (Shape s : fits)
    for (const Tensor* tensor : readable(s, want)) candidates.push_back({tensor, shape == Shape::Matrix && s == Shape::Rows});
  if (!candidates.empty() && random_() % 5 != 0) {
    auto [tensor, unsqueeze] = pick(random_, candidates);
    if (tensor->shape == Shape::Matrix) wholeMatrix_ = true;
    std::string text = unsqueeze ? fmt::format("unsqueeze({}, 1)", tensor->name) : tensor->name;
    return Expr{text, tensor->dtype, 1, true};
  }
  if (want == Kind::Bool) return Expr{"true", DType::Bool, 1, true, true};
  if (want == Kind::Int) return Expr{fmt::format("{}", int(random_() % 5) + 1), DType::I64, 5, true, true};
  if (!scalars_.empty() && coin(random_)) {
    const Scalar& scalar = pick(random_, scalars_);
    if (kindOf(scalar.dtype) == Kind::Float) return Expr{scalar.name, scalar.dtype, std::abs(scalar.value) + 1, true};
  }
  return Expr{pick<std::string>(random_, {"0.5", "2.0", "1.25"}), DType::F32, 2, true, true};
}

std::optional<Expr> Generator::kernelCall() {
  std::vector<const Tensor*> matrices = readable(Shape::Matrix, Kind::Float);
  if (matrices.empty() || calls_ >= 2) return std::nullopt;
  ++calls_;
  wholeMatrix_ = true;
  const Tensor& x = *pick(random_, matrices);
  DType t = pick(random_, kCallDtypes);
  auto as = [&](const Tensor& tensor) { return tensor.dtype == t ? tensor.name : fmt::format("{}({})", dtypeName(t), tensor.name); };
  std::vector<const Tensor*> cols = readable(Shape::Cols, Kind::Float);
  const Tensor* square = nullptr;
  for (const Tensor& input : inputs_)
    if (input.shape == Shape::Square) square = &input;
  switch (random_() % 6) {
    case 0: importNn_ = wholeMatrix_ = true; return Expr{"nn.softmax(" + as(x) + ")", t, 1, false};
    case 1: importNn_ = wholeMatrix_ = true; return Expr{"nn.log_softmax(" + as(x) + ")", t, 12, false};
    case 2:
      if (cols.size() >= 1) {
        importNn_ = true;
        const Tensor& w = *pick(random_, cols);
        const Tensor& b = *pick(random_, cols);
        return Expr{fmt::format("nn.layernorm({}, {}, {}, eps=1e-3)", as(x), as(w), as(b)), t, 25, false};
      }
      [[fallthrough]];
    case 3:
      if (cols.size() >= 1) {
        importNn_ = true;
        return Expr{fmt::format("nn.rmsnorm({}, {})", as(x), as(*pick(random_, cols))), t, 12, false};
      }
      [[fallthrough]];
    case 4:
      if (square) {
        importLinalg_ = true;
        return Expr{fmt::format("linalg.matmul({}, {})", as(x), as(*square)), t, 100, false};
      }
      [[fallthrough]];
    default:
      importLinalg_ = true;
      return Expr{fmt::format("linalg.transpose(linalg.transpose({}))", as(x)), t, 1, true};
  }
}

Expr Generator::wholeExpr(Shape shape, Kind want, int depth) {
  if (depth <= 0) return wholeLeaf(shape, want);
  auto sub = [&](Kind kind) { return wholeExpr(shape, kind, depth - 1); };
  if (want == Kind::Bool) {
    Expr a = wholeLeaf(shape, Kind::Int);
    return Expr{fmt::format("({} {} 0)", a.text, pick<std::string>(random_, {"<", ">=", "!="})), DType::Bool, 1, true};
  }
  if (want == Kind::Int) {
    Expr a = sub(Kind::Int), b = sub(Kind::Int);
    return binary(pick<std::string>(random_, {"+", "-", "*", "/", "%"}), a, b, a.magnitude * b.magnitude);
  }
  std::vector<const Tensor*> matrices = readable(Shape::Matrix, Kind::Float);
  switch (random_() % 10) {
    case 0: case 1: {
      Expr a = sub(Kind::Float), b = sub(random_() % 4 == 0 ? Kind::Int : Kind::Float);
      if (kindOf(b.dtype) == Kind::Int && b.magnitude > 100) b = sub(Kind::Float);
      std::string op = pick<std::string>(random_, {"+", "-", "*"});
      return bounded(binary(op, a, b, op == "*" ? a.magnitude * b.magnitude : a.magnitude + b.magnitude));
    }
    case 2: {
      Expr a = sub(Kind::Float);
      std::string f = pick<std::string>(random_, {"sin", "tanh", "sigmoid", "erf", "cos"});
      return Expr{f + "(" + a.text + ")", a.dtype, 1, false};
    }
    case 3: {
      Expr a = sub(Kind::Float), b = sub(Kind::Float);
      Expr e = binary(",", a, b, std::max(a.magnitude, b.magnitude));
      return Expr{pick<std::string>(random_, {"max", "min"}) + e.text, e.dtype, e.magnitude, false};
    }
    case 4: {
      Expr c = wholeExpr(shape, Kind::Bool, depth - 1), a = sub(Kind::Float), b = sub(Kind::Float);
      Expr e = binary(",", a, b, std::max(a.magnitude, b.magnitude));
      return Expr{fmt::format("where({}, {}, {})", c.text, a.text, b.text), e.dtype, e.magnitude, false};
    }
    case 5:
      if (shape == Shape::Matrix && !matrices.empty()) {
        const Tensor& x = *pick(random_, matrices);
        std::string f = pick<std::string>(random_, {"softmax", "log_softmax"});
        wholeMatrix_ = true;
        return Expr{fmt::format("{}({}, axis={})", f, x.name, pick<std::string>(random_, {"1", "-1", "0"})), x.dtype,
                    f == "softmax" ? 1.0 : 12.0, false};
      }
      break;
    case 6:
      if (shape == Shape::Matrix)
        if (std::optional<Expr> call = kernelCall()) return *call;
      break;
    case 7:
      if (shape == Shape::Matrix && !fns_.empty()) {
        const Fn& fn = pick(random_, fns_);
        std::string args;
        for (int k = 0; k < fn.arity; ++k) args += (k ? ", " : "") + bounded(sub(Kind::Float), 1).text;
        return Expr{fmt::format("{}({})", fn.name, args), DType::F32, 3, false};
      }
      break;
    case 8:
      if (shape == Shape::Matrix) {
        for (const Tensor& input : inputs_)
          if (input.shape == Shape::Square && kindOf(input.dtype) == Kind::Float && !matrices.empty()) {
            const Tensor& x = *pick(random_, matrices);
            wholeMatrix_ = true;
            std::string a = x.dtype == input.dtype ? x.name : castTo(input.dtype, Expr{x.name, x.dtype, 1, true});
            return Expr{fmt::format("({} @ {})", a, input.name), input.dtype, 100, false};
          }
      }
      break;
    default: break;
  }
  return sub(Kind::Float);
}

DType Generator::outputDtype(const Expr& e) {
  if (coin(random_)) return e.dtype;
  switch (kindOf(e.dtype)) {
    case Kind::Float: return pick(random_, kFloatDtypes);
    case Kind::Int: return pick<DType>(random_, {DType::I8, DType::I32, DType::I64, DType::F32, DType::F64});
    default: return pick<DType>(random_, {DType::Bool, DType::I32, DType::F32});
  }
}

Tensor Generator::statement(Shape shape, bool output, const std::vector<std::string>& indices, const std::string& forcedName,
                            const std::function<Expr(Scope&)>& operand) {
  std::string name = forcedName.empty() ? fresh() : forcedName;
  Kind kind = random_() % 5 == 0 ? (coin(random_) ? Kind::Int : Kind::Bool) : Kind::Float;
  // [R, 1] in index form only as an output: its second index takes its range from the declaration.
  bool wholeForm = indices.empty() && (random_() % 3 == 0 || (shape == Shape::RowsKeep && !output));
  Expr e;
  std::vector<std::string> loops;
  if (wholeForm) {
    if (shape == Shape::Matrix) {
      // At least one operand is a whole matrix, so that the result is one.
      for (int attempt = 0;; ++attempt) {
        wholeMatrix_ = false;
        e = wholeExpr(shape, kind, 1 + random_() % 3);
        if (wholeMatrix_ && !e.literal) break;
        if (attempt > 10) {
          e = wholeLeaf(Shape::Matrix, Kind::Float);
          e.text = fmt::format("broadcast_to({}, [{}, {}])", e.text, rows_, cols_);
          if (!e.literal) break;
        }
      }
      loops = {"i0", "i1"};
    } else {  // a reduction of a matrix along one axis
      std::vector<const Tensor*> matrices = readable(Shape::Matrix, kind == Kind::Bool ? Kind::Float : kind);
      if (matrices.empty()) matrices = readable(Shape::Matrix, Kind::Float);
      const Tensor& x = *pick(random_, matrices);
      std::string axis = shape == Shape::Cols ? pick<std::string>(random_, {"0", "-2"}) : pick<std::string>(random_, {"1", "-1"});
      std::string op = pick<std::string>(random_, {"sum", "max", "min", "argmax", "argmin"});
      if (kindOf(x.dtype) == Kind::Float) op = pick<std::string>(random_, {"sum", "max", "mean", "argmax", "logsumexp"});
      if (!options_.argmax && (op == "argmax" || op == "argmin")) op = "min";
      if (shape == Shape::RowsKeep && (op == "argmax" || op == "argmin")) op = "max";
      DType dtype = op == "argmax" || op == "argmin" ? DType::I64 : x.dtype;
      std::string keep = shape == Shape::RowsKeep ? ", keepdim=true" : "";
      e = Expr{fmt::format("{}({}, axis={}{})", op, x.name, axis, keep), dtype, op == "sum" ? 1200.0 : 8.0, kindOf(dtype) != Kind::Float};
      loops = {"i0", "r0"};
    }
  } else {
    std::vector<std::string> names = indices;
    std::set<std::string> anchored;
    Scope scope;
    scope.anchored = &anchored;
    scope.canReduce = !withoutReductions_;
    if (names.empty()) {
      int count = shape == Shape::Matrix || shape == Shape::RowsKeep ? 2 : 1;
      while (int(names.size()) < count) {
        std::string index = freshIndex(scope.visible);
        scope.visible.insert(index);
        names.push_back(index);
      }
    }
    for (const std::string& index : names) scope.visible.insert(index);
    std::string lhs = names[0];
    switch (shape) {
      case Shape::Matrix: scope.row = names[0]; scope.col = names[1]; lhs += ", " + names[1]; break;
      case Shape::Cols: scope.col = names[0]; break;
      case Shape::RowsKeep: scope.row = names[0]; lhs += ", " + names[1]; break;
      default: scope.row = names[0]; break;
    }
    loops = names;
    // Only an output takes its ranges from its declaration: every other stage reads each of its
    // indices alone somewhere.
    for (int attempt = 0;; ++attempt) {
      anchored.clear();
      e = expr(scope, kind, 1 + random_() % 3);
      if (operand) {
        Expr first = operand(scope);
        e = bounded(binary(pick<std::string>(random_, {"+", "*", "-"}), first, e, first.magnitude * (e.magnitude + 1)));
      }
      bool ok = output || std::all_of(names.begin(), names.end(), [&](const std::string& index) { return anchored.count(index); });
      if (ok && !e.literal) break;
      if (attempt > 10) kind = Kind::Float;
      if (attempt > 20) {  // the first input read alone, in a reduction where the scope lacks a dimension
        const Tensor& x = inputs_.front();
        std::string k = freshIndex(scope.visible);
        std::string anchor = scope.row && scope.col ? fmt::format("{}[{}, {}]", x.name, *scope.row, *scope.col)
                           : scope.row              ? fmt::format("sum[{0}]({1}[{2}, {0}])", k, x.name, *scope.row)
                                                    : fmt::format("sum[{0}]({1}[{0}, {2}])", k, x.name, *scope.col);
        if (e.dtype == DType::Bool) e = Expr{"i32(" + e.text + ")", DType::I32, 1, true};
        e = bounded(binary("+", Expr{anchor, x.dtype, 100, false}, e, 100 + e.magnitude));
        break;
      }
    }
    name += "[" + lhs + "]";
  }
  DType dtype = e.dtype;
  if (output) {
    dtype = outputDtype(e);
    bool toInt = !isFloat(dtype) && isFloat(e.dtype);
    // A float becomes an integer only from what both compute exactly.
    if (toInt && !(e.exact && e.magnitude < 100)) dtype = e.dtype;
    if (dtype == DType::Bool && e.dtype != DType::Bool) dtype = e.dtype;
    if (dtype == DType::F64 && !options_.f64Outputs) dtype = DType::F32;
    if (dtype != e.dtype) e.text = castTo(dtype, e);
  }
  body_.push_back(fmt::format("    {} = {}", name, e.text));
  Tensor tensor{name.substr(0, name.find('[')), dtype, shape, false};
  loops_.push_back({tensor.name, loops});
  stages_.push_back(tensor);
  if (output) outputs_.push_back(tensor);
  return tensor;
}

std::string Generator::genericDirectives() {
  std::string s;
  int count = 1 + random_() % 3;
  for (int k = 0; k < count; ++k) {
    const StageLoops& stage = pick(random_, loops_);
    if (stage.loops.empty()) continue;
    const std::string& loop = pick(random_, stage.loops);
    switch (random_() % 7) {
      case 0: s += fmt::format("  inline {}\n", stage.name); break;
      case 1: s += fmt::format("  root {}\n", stage.name); break;
      case 2: {
        if (!options_.sharedComputedStages) break;
        const StageLoops& at = pick(random_, loops_);
        if (!at.loops.empty()) s += fmt::format("  compute {} at {}.{}\n", stage.name, at.name, pick(random_, at.loops));
        break;
      }
      case 3: {
        int64_t factor = pick<int64_t>(random_, {2, 4, 32, 64, 128});
        s += fmt::format("  split {0}.{1} by {2} -> ({1}_g{3}, {1}_h{3})\n  bind {0}.{1}_g{3} to block.x\n"
                         "  bind {0}.{1}_h{3} to thread.x\n", stage.name, loop, factor, k);
        break;
      }
      case 4: s += fmt::format("  unroll {}.{}\n", stage.name, loop); break;
      case 5: s += fmt::format("  vectorize {}.{}\n", stage.name, loop); break;
      default: s += fmt::format("  bind {}.{} to {}\n", stage.name, loop, pick<std::string>(random_, {"block.x", "thread.x", "warp.x"})); break;
    }
  }
  return s;
}

GeneratedProgram Generator::generate() {
  kernelName_ = pick<std::string>(random_, {"k", "prog", "kern", "compute_all", "fused"}) + fmt::format("{}", program_.seed % 1000);
  used_.insert(kernelName_);
  for (std::string* size : {&rows_, &cols_, &inner_}) {
    *size = draw({"N", "D", "M", "K", "L", "R", "C", "W", "H", "S", "rows", "cols", "B", "E"});
    used_.insert(*size);
  }
  enum class Core { Chain, Row, Matmul, Free } core = pick<Core>(random_, {Core::Chain, Core::Row, Core::Matmul, Core::Free});
  DType main = pick<DType>(random_, {DType::F32, DType::F32, DType::F16, DType::BF16, DType::F64});

  // fns: bounded for arguments in [-1, 1]; the second may call the first.
  int fnCount = random_() % 3;
  for (int k = 0; k < fnCount; ++k) {
    Fn fn{fresh(), 1 + int(random_() % 2)};
    std::string p = draw(kPlainIndices), q;
    do q = draw(kPlainIndices); while (q == p);
    std::string args = fn.arity == 1 ? p : p + ", " + q;
    std::string other = fn.arity == 1 ? p : q;
    std::vector<std::string> bodies{
        fmt::format("tanh({0}) * 0.5 + sigmoid({1})", p, other), fmt::format("{0} * {1} - 0.25 * {0}", p, other),
        fmt::format("exp(-abs({0})) + {1} / 2", p, other), fmt::format("max({0}, {1}) + min({0}, 0.5)", p, other)};
    if (!fns_.empty()) bodies.push_back(fmt::format("{}({}) * 0.5", fns_.back().name, fns_.back().arity == 1 ? p : p + ", " + other));
    if (coin(random_)) {
      bodies.push_back(fmt::format("nn.gelu_tanh({0}) + {1}", p, other));
      importNn_ = true;
    }
    fnDefinitions_.push_back(fmt::format("fn {}({}) = {}", fn.name, args, pick(random_, bodies)));
    fns_.push_back(fn);
  }

  // Inputs: a matrix of the main dtype, then others of any dtype and shape.
  auto input = [&](DType dtype, Shape shape) {
    inputs_.push_back(Tensor{fresh(), dtype, shape, true});
    return inputs_.back();
  };
  Tensor x = input(main, Shape::Matrix);
  int extra = random_() % 4;
  for (int k = 0; k < extra; ++k) {
    DType dtype = coin(random_) ? main : pick(random_, kAllDtypes);
    input(dtype, pick<Shape>(random_, {Shape::Matrix, Shape::Cols, Shape::Cols, Shape::Rows, Shape::RowsKeep, Shape::Square}));
  }
  int scalarCount = random_() % 3;
  for (int k = 0; k < scalarCount; ++k) {
    DType dtype = pick<DType>(random_, {DType::F32, DType::F32, DType::I32, DType::F64});
    scalars_.push_back(Scalar{fresh(), dtype, isFloat(dtype) ? 0.5 : 3, !isFloat(dtype) || coin(random_)});
  }

  // Random stages before the core, some of them outputs.
  int before = random_() % 4;
  for (int k = 0; k < before; ++k)
    statement(pick<Shape>(random_, {Shape::Matrix, Shape::Matrix, Shape::Rows, Shape::Cols, Shape::RowsKeep}), random_() % 3 == 0);

  std::string schedule;
  std::vector<std::string> computedAt;  // the core's stages its schedule may compute at a loop of another
  switch (core) {
    case Core::Matmul: {
      MatmulNames names{kernelName_, "", fresh(), fresh(), "", "", ""};
      std::set<std::string> visible;
      for (std::string* index : {&names.i, &names.j, &names.k}) {
        *index = freshIndex(visible);
        visible.insert(*index);
      }
      DType dtype = pick<DType>(random_, {main, main, DType::F32, DType::F16, DType::BF16, DType::I32});
      inputs_.push_back(Tensor{names.A, dtype, Shape::RowsInner, true});
      inputs_.push_back(Tensor{names.B, dtype, Shape::InnerCols, true});
      std::string product = fmt::format("sum[{}]({}[{}, {}] * {}[{}, {}])", names.k, names.A, names.i, names.k, names.B,
                                        names.k, names.j);
      bool epilogue = coin(random_);
      std::string acc = epilogue ? fresh() : "";
      names.C = fresh();
      if (epilogue) {
        body_.push_back(fmt::format("    {}[{}, {}] = {}", acc, names.i, names.j, product));
        Tensor accTensor{acc, dtype, Shape::Matrix, false};
        loops_.push_back({acc, {names.i, names.j, names.k}});
        statement(Shape::Matrix, true, {names.i, names.j}, names.C, [&](Scope& scope) {
          return bounded(read(accTensor, scope));
        });
        // An epilogue with a reduction of its own at each element is no epilogue (the schedule's C then
        // lacks the product's loops).
        if (reduces(body_.back())) program_.scheduleMayBeRefused = true;
        // Read only by the epilogue, which it is fused into: the schedule's C has the product's loops.
      } else {
        DType out = dtype;
        body_.push_back(fmt::format("    {}[{}, {}] = {}", names.C, names.i, names.j, product));
        stages_.push_back(Tensor{names.C, out, Shape::Matrix, false});
        outputs_.push_back(stages_.back());
      }
      loops_.push_back({names.C, {names.i, names.j, names.k}});
      schedule = randomMatmulSchedule(random_, names);
      break;
    }
    case Core::Row: {
      RowNames names{kernelName_, "", {}, "", "", ""};
      std::set<std::string> visible;
      names.n = freshIndex(visible);
      visible.insert(names.n);
      names.d = freshIndex(visible);
      int members = 1 + random_() % 2;
      for (int k = 0; k < members; ++k) {
        std::string member = fresh();
        std::string op = pick<std::string>(random_, {"max", "sum", "mean", "min"});
        Scope scope;
        std::set<std::string> anchored;
        scope.anchored = &anchored;
        scope.row = names.n;
        scope.col = names.d;
        scope.canReduce = false;
        scope.visible = {names.n, names.d};
        Expr body = read(x, scope);
        if (coin(random_)) {
          Expr more = bounded(floatExpr(scope, 1 + random_() % 2));
          body = binary(pick<std::string>(random_, {"+", "*", "-"}), body, more, more.magnitude + 1);
        }
        if (!anchored.count(names.d) || !anchored.count(names.n)) body = binary("+", Expr{fmt::format("{}[{}, {}]", x.name, names.n, names.d), x.dtype, 1, true}, body, 3);
        body_.push_back(fmt::format("    {}[{}] = {}[{}]({})", member, names.n, op, names.d, body.text));
        stages_.push_back(Tensor{member, body.dtype, Shape::Rows, false});
        loops_.push_back({member, {names.n, names.d}});
        names.members.push_back(member);
      }
      names.root = fresh();
      // The root reads its members at its own row only: a member read elsewhere (inside a reduction of
      // the root's expression) is computed by a kernel of its own, where the schedule cannot place it.
      std::vector<Tensor> memberStages(stages_.end() - members, stages_.end());
      hide(names.members);
      statement(Shape::Matrix, true, {names.n, names.d}, names.root, [&](Scope& scope) {
        Expr e = read(x, scope);
        for (const Tensor& member : memberStages) {
          Expr m{fmt::format("{}[{}]", member.name, names.n), member.dtype, 30, false};
          e = bounded(binary(pick<std::string>(random_, {"+", "-", "*"}), e, m, e.magnitude * 30));
        }
        return e;
      });
      schedule = randomRowSchedule(random_, names);
      if (options_.sharedComputedStages) stages_.insert(stages_.end(), memberStages.begin(), memberStages.end());
      computedAt = names.members;
      break;
    }
    case Core::Chain: {
      ChainNames names{kernelName_, "", "", "", ""};
      std::set<std::string> visible;
      names.n = freshIndex(visible);
      visible.insert(names.n);
      names.d = freshIndex(visible);
      withoutReductions_ = !options_.computeAtReductions;
      Tensor t = statement(Shape::Matrix, false, {names.n, names.d});
      withoutReductions_ = false;
      // t computed at a loop of y cannot read a reduction computed in place in its own loops: its own,
      // or an earlier stage's that Loop IR fuses into them.
      bool readsStage = std::any_of(stages_.begin(), stages_.end(), [&](const Tensor& stage) {
        return stage.name != t.name && std::regex_search(body_.back(), std::regex("\\b" + stage.name + "\\b"));
      });
      if (reduces(body_.back()) || readsStage) program_.scheduleMayBeRefused = true;
      names.t = t.name;
      names.y = fresh();
      hide({names.t});  // y reads t at its own element only, as the members of a row core
      statement(Shape::Matrix, true, {names.n, names.d}, names.y, [&](Scope& scope) { return bounded(read(t, scope)); });
      schedule = randomChainSchedule(random_, names);
      if (options_.sharedComputedStages) stages_.push_back(t);
      computedAt = {names.t};
      break;
    }
    case Core::Free:
      statement(pick<Shape>(random_, {Shape::Matrix, Shape::Rows, Shape::Cols}), true);
      break;
  }
  // Random stages after it, some of them outputs; the last one always.
  int after = random_() % 3;
  size_t coreEnd = body_.size();
  for (int k = 0; k < after; ++k) statement(pick<Shape>(random_, {Shape::Matrix, Shape::Rows, Shape::Cols}), k + 1 == after || coin(random_));
  // A later stage that reads one of those elsewhere than at the loop may put it in a kernel of its own.
  for (size_t k = coreEnd; k < body_.size(); ++k)
    for (const std::string& stage : computedAt)
      if (std::regex_search(body_[k], std::regex("\\b" + stage + "\\b"))) program_.scheduleMayBeRefused = true;

  // Directives on a core's stages may take a stage it computes at a loop of another away from that
  // loop (sharedComputedStages).
  if (core == Core::Free || (random_() % 4 == 0 && options_.sharedComputedStages)) {
    std::string directives = genericDirectives();
    if (!directives.empty()) {
      program_.scheduleMayBeRefused = true;
      if (schedule.empty()) schedule = fmt::format("schedule {} {{\n}}\n", kernelName_);
      schedule.insert(schedule.rfind('}'), directives);
    }
  }

  // The file.
  std::string& source = program_.source;
  source = fmt::format("# generated by tests/program_generator.cpp, seed {}\n", program_.seed);
  if (importNn_) source += "import nn\n";
  if (importLinalg_) source += "import linalg\n";
  for (const std::string& fn : fnDefinitions_) source += fn + "\n";
  std::string params;
  for (const Tensor& tensor : inputs_) {
    params += fmt::format("{}{}: {}{}", params.empty() ? "" : ", ", tensor.name, dtypeName(tensor.dtype), dims(tensor.shape));
  }
  for (const Scalar& scalar : scalars_) {
    std::string value = isFloat(scalar.dtype) ? fmt::format("{:.1f}", scalar.value) : fmt::format("{}", int(scalar.value));
    params += fmt::format(", {}: {}", scalar.name, dtypeName(scalar.dtype));
    if (scalar.hasDefault) params += " = " + value;
  }
  std::string outs;
  for (const Tensor& tensor : outputs_)
    outs += fmt::format("{}{}: {}{}", outs.empty() ? "" : ", ", tensor.name, dtypeName(tensor.dtype), dims(tensor.shape));
  source += fmt::format("kernel {}({}) -> ({}) {{\n", kernelName_, params, outs);
  for (const std::string& line : body_) source += line + "\n";
  source += "}\n" + schedule;
  program_.kernel = kernelName_;

  // Sizes: ragged ones, tiny ones, and a 0 now and then.
  std::uniform_int_distribution<int64_t> rowsDist(1, 13), colsDist(1, 90), innerDist(1, 40);
  program_.sizes.push_back({{rows_, rowsDist(random_)}, {cols_, colsDist(random_)}, {inner_, innerDist(random_)}});
  program_.sizes.push_back({{rows_, 1 + int64_t(random_() % 3)}, {cols_, 1 + int64_t(random_() % 3)}, {inner_, 1 + int64_t(random_() % 3)}});
  if (options_.zeroSizes && random_() % 4 == 0) {
    auto zero = program_.sizes.front();
    zero[pick(random_, std::vector<std::string>{rows_, cols_})] = 0;
    program_.sizes.push_back(zero);
  }
  if (core != Core::Matmul)
    for (auto& sizes : program_.sizes) sizes.erase(inner_);
  return program_;
}

}  // namespace

GeneratedProgram generateProgram(uint64_t seed, const GeneratorOptions& options) {
  return Generator(seed, options).generate();
}

}  // namespace emmy::testing
