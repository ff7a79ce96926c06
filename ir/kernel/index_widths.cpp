// Index arithmetic in 64 bits costs twice the instructions of 32 (an add is two, a multiply three), and
// a kernel's loops are full of it. Every index value is bounded by a polynomial in the sizes: a loop's
// variable by its end, a product by the product of the bounds, and so on (IndexArithmetic). The most of
// all those polynomials, evaluated by the launcher at the call's sizes, says whether every index value of
// the call fits in 32 bits. So each kernel becomes two: the same code with 32-bit indices, launched where
// the bound is below 2^31, and the 64-bit one everywhere else (`NAME__i64`). A kernel whose bound is a
// constant needs only one of them.
#include "ir/kernel/index_widths.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include <fmt/format.h>

namespace emmy::kernel {

using namespace tensor;

namespace {

constexpr const char* kIndexLimitName = "launch.indexLimit";

IndexBound constantBound(int64_t value) {
  IndexBound bound;
  if (value != 0) bound.terms[{}] = std::fabs(static_cast<double>(value));
  bound.nonnegative = value >= 0;
  return bound;
}

// Coefficients past 2^62 make a bound no launch can meet; they stop there, and never reach infinity.
std::optional<IndexBound> finite(IndexBound bound) {
  for (const auto& [monomial, coefficient] : bound.terms)
    if (!(coefficient <= 0x1p62)) return std::nullopt;
  return bound;
}

std::optional<IndexBound> sum(const IndexBound& a, const IndexBound& b, bool nonnegative) {
  IndexBound result{a.terms, nonnegative};
  for (const auto& [monomial, coefficient] : b.terms) result.terms[monomial] += coefficient;
  return finite(std::move(result));
}

std::optional<IndexBound> product(const IndexBound& a, const IndexBound& b) {
  IndexBound result{{}, a.nonnegative && b.nonnegative};
  for (const auto& [left, x] : a.terms)
    for (const auto& [right, y] : b.terms) {
      std::vector<std::string> monomial = left;
      monomial.insert(monomial.end(), right.begin(), right.end());
      std::sort(monomial.begin(), monomial.end());
      result.terms[monomial] += x * y;
    }
  return finite(std::move(result));
}

// At least either (each coefficient the larger): a bound of max(a, b), min(a, b) and a select of them.
IndexBound larger(const IndexBound& a, const IndexBound& b, bool nonnegative) {
  IndexBound result{a.terms, nonnegative};
  for (const auto& [monomial, coefficient] : b.terms) result.terms[monomial] = std::max(result.terms[monomial], coefficient);
  return result;
}

size_t degree(const IndexBound& bound) {
  size_t most = 0;
  for (const auto& [monomial, coefficient] : bound.terms) most = std::max(most, monomial.size());
  return most;
}

// Of two bounds of the same value, the one likely smaller at large sizes: the lower degree, then fewer terms.
const IndexBound& tighter(const IndexBound& a, const IndexBound& b) {
  if (degree(a) != degree(b)) return degree(a) < degree(b) ? a : b;
  return b.terms.size() < a.terms.size() ? b : a;
}

// A divisor that is a constant times sizes (the extent a flat index is divided by): its sizes and the
// constant's magnitude.
struct Monomial {
  std::vector<std::string> sizes;  // sorted
  double factor = 1;
};

std::optional<Monomial> monomialOf(const Expr& e) {
  if (const auto* immediate = e.as<IntImm>())
    return immediate->value == 0 ? std::nullopt : std::optional<Monomial>{{{}, std::fabs(static_cast<double>(immediate->value))}};
  if (const auto* size = e.as<SizeVar>()) return Monomial{{size->name}, 1};
  const auto* product = e.as<Binary>();
  if (!product || product->op != BinaryOp::Mul) return std::nullopt;
  std::optional<Monomial> a = monomialOf(*product->lhs), b = monomialOf(*product->rhs);
  if (!a || !b) return std::nullopt;
  a->sizes.insert(a->sizes.end(), b->sizes.begin(), b->sizes.end());
  std::sort(a->sizes.begin(), a->sizes.end());
  a->factor *= b->factor;
  return a;
}

// |a / d| for a nonzero integer d = c * S1 * ... (a quotient by 0 is 0): each term of a's bound over |c|,
// and without the sizes S1 ... where it has them all (|m / S| <= |m| where it has not: |S| >= 1).
IndexBound quotient(const IndexBound& a, const Monomial& divisor, bool nonnegative) {
  IndexBound result{{}, nonnegative};
  for (const auto& [monomial, coefficient] : a.terms) {
    std::vector<std::string> rest;
    bool divides = std::includes(monomial.begin(), monomial.end(), divisor.sizes.begin(), divisor.sizes.end());
    if (divides)
      std::set_difference(monomial.begin(), monomial.end(), divisor.sizes.begin(), divisor.sizes.end(), std::back_inserter(rest));
    result.terms[divides ? rest : monomial] += coefficient / divisor.factor;
  }
  return result;
}

std::optional<int64_t> constantOf(const Expr& e) {
  if (const auto* immediate = e.as<IntImm>()) return immediate->value;
  return std::nullopt;
}

}  // namespace

IndexArithmetic::IndexArithmetic(const Function& function) : function_(function) { scopes_.emplace_back(); }

const IndexArithmetic::Variable* IndexArithmetic::variable(const std::string& name) const {
  for (auto scope = scopes_.rbegin(); scope != scopes_.rend(); ++scope)
    if (auto found = scope->find(name); found != scope->end()) return &found->second;
  return nullptr;
}

void IndexArithmetic::defineVariable(const std::string& name, std::optional<IndexBound> bound,
                                     std::optional<ExactForm> exact) {
  if (!exact && bound) {
    std::string atom = fmt::format("#{}", atomBounds_.size());
    atomBounds_[atom] = *bound;
    exact = ExactForm{{{atom}, 1}};
  }
  scopes_.back()[name] = {std::move(bound), std::move(exact)};
}

namespace {

// Exact forms stay small: a few terms of low degree, coefficients that do not overflow.
constexpr size_t kMostExactTerms = 16;
constexpr size_t kMostExactDegree = 4;
constexpr int kExactFormLevels = 6;

using ExactForm = IndexArithmetic::ExactForm;

std::optional<ExactForm> exactSum(const ExactForm& a, const ExactForm& b, int64_t sign) {
  ExactForm result = a;
  for (const auto& [monomial, coefficient] : b) {
    int64_t& total = result[monomial];
    int64_t signedCoefficient;
    if (__builtin_mul_overflow(coefficient, sign, &signedCoefficient) ||
        __builtin_add_overflow(total, signedCoefficient, &total))
      return std::nullopt;
    if (total == 0) result.erase(monomial);
  }
  if (result.size() > kMostExactTerms) return std::nullopt;
  return result;
}

std::optional<ExactForm> exactProduct(const ExactForm& a, const ExactForm& b) {
  ExactForm result;
  for (const auto& [left, x] : a)
    for (const auto& [right, y] : b) {
      std::vector<std::string> monomial = left;
      monomial.insert(monomial.end(), right.begin(), right.end());
      std::sort(monomial.begin(), monomial.end());
      int64_t term;
      if (monomial.size() > kMostExactDegree || __builtin_mul_overflow(x, y, &term)) return std::nullopt;
      int64_t& total = result[monomial];
      if (__builtin_add_overflow(total, term, &total)) return std::nullopt;
      if (total == 0) result.erase(monomial);
    }
  if (result.size() > kMostExactTerms) return std::nullopt;
  return result;
}

constexpr const char* kSizeAtom = "size:";
constexpr const char* kHardwareAtom = "hardware:";

}  // namespace

std::optional<ExactForm> IndexArithmetic::exactFormOf(const Expr& e, int levels) const {
  if (levels < 0 || e.dtype != DType::I64) return std::nullopt;
  if (const auto* immediate = e.as<IntImm>())
    return immediate->value == 0 ? ExactForm{} : ExactForm{{{}, immediate->value}};
  if (const auto* size = e.as<SizeVar>()) return ExactForm{{{kSizeAtom + size->name}, 1}};
  if (const auto* axis = e.as<AxisVar>()) {
    if (isHardwareIndex(axis->name) || isLaunchSharedBytes(axis->name)) return ExactForm{{{kHardwareAtom + axis->name}, 1}};
    const Variable* defined = variable(axis->name);
    return defined ? defined->exact : std::nullopt;
  }
  if (const auto* negation = e.as<Unary>(); negation && negation->op == UnaryOp::Neg) {
    std::optional<ExactForm> operand = exactFormOf(*negation->operand, levels - 1);
    return operand ? exactSum({}, *operand, -1) : std::nullopt;
  }
  const auto* binary = e.as<Binary>();
  if (!binary || (binary->op != BinaryOp::Add && binary->op != BinaryOp::Sub && binary->op != BinaryOp::Mul))
    return std::nullopt;
  std::optional<ExactForm> a = exactFormOf(*binary->lhs, levels - 1);
  if (!a) return std::nullopt;
  std::optional<ExactForm> b = exactFormOf(*binary->rhs, levels - 1);
  if (!b) return std::nullopt;
  if (binary->op == BinaryOp::Mul) return exactProduct(*a, *b);
  return exactSum(*a, *b, binary->op == BinaryOp::Add ? 1 : -1);
}

std::optional<IndexBound> IndexArithmetic::boundOfExactForm(const ExactForm& form) const {
  std::optional<IndexBound> total = IndexBound{};
  for (const auto& [monomial, coefficient] : form) {
    std::optional<IndexBound> term = constantBound(coefficient);
    for (const std::string& atom : monomial) {
      std::optional<IndexBound> factor;
      if (atom.starts_with(kSizeAtom)) factor = boundOf(SizeVar(atom.substr(std::string_view(kSizeAtom).size())));
      else if (atom.starts_with(kHardwareAtom)) factor = boundOf(AxisVar(atom.substr(std::string_view(kHardwareAtom).size())));
      else factor = atomBounds_.at(atom);
      if (!factor) return std::nullopt;
      term = product(*term, *factor);
      if (!term) return std::nullopt;
    }
    total = sum(*total, *term, false);
    if (!total) return std::nullopt;
  }
  return total;
}

IndexBound IndexArithmetic::tightenedByExactForm(const Expr& e, IndexBound operands) const {
  std::optional<ExactForm> form = exactFormOf(e, kExactFormLevels);
  std::optional<IndexBound> exact = form ? boundOfExactForm(*form) : std::nullopt;
  if (!exact) return operands;
  exact->nonnegative = operands.nonnegative;  // the same value
  return tighter(operands, *exact);
}

std::optional<IndexBound> IndexArithmetic::boundOf(const Expr& e) const {
  return boundOf(e, [](const IndexBound&) {});
}

std::optional<IndexBound> IndexArithmetic::boundOf(const Expr& e, const std::function<void(const IndexBound&)>& each) const {
  // Every subexpression is visited, user values included: their subscripts and the indices they use as
  // values are index arithmetic too.
  auto bounded = [&](std::optional<IndexBound> bound) {
    if (bound && e.dtype == DType::I64) {
      each(*bound);
      return bound;
    }
    return std::optional<IndexBound>{};
  };
  return dispatch(e, [&](const auto& node) -> std::optional<IndexBound> {
    using Node = std::decay_t<decltype(node)>;
    if constexpr (std::is_same_v<Node, IntImm>) {
      return bounded(constantBound(node.value));
    } else if constexpr (std::is_same_v<Node, SizeVar>) {
      // Sizes the caller gives are checked nonnegative; a derived one is what its definition gives.
      return bounded(IndexBound{{{{node.name}, 1}}, !isDerivedSizeName(node.name)});
    } else if constexpr (std::is_same_v<Node, AxisVar>) {
      const std::string& name = node.name;
      if (isLaunchSharedBytes(name)) return bounded(constantBound(function_.mostLaunchSharedBytes()));
      if (isHardwareIndex(name)) {
        int dimension = name.back() - 'x';
        int64_t threads = function_.blockThreads[dimension];
        if (name.rfind("threadIdx", 0) == 0) return bounded(constantBound(threads - 1));
        if (name.rfind("blockDim", 0) == 0) return bounded(constantBound(threads));
        // blockIdx and gridDim: at most the grid the launcher computes.
        std::optional<IndexBound> grid = IndexArithmetic(function_).boundOf(*function_.gridBlocks[dimension]);
        if (grid) grid->nonnegative = true;
        return bounded(grid);
      }
      const Variable* defined = variable(name);
      return bounded(defined ? defined->bound : std::nullopt);
    } else if constexpr (std::is_same_v<Node, Load>) {
      for (const ExprPtr& index : node.indices) boundOf(*index, each);
      if (node.padValue) boundOf(*node.padValue, each);
      return std::nullopt;
    } else if constexpr (std::is_same_v<Node, Unary>) {
      std::optional<IndexBound> operand = boundOf(*node.operand, each);
      if (!operand) return std::nullopt;
      switch (node.op) {
        case UnaryOp::Neg: return bounded(IndexBound{operand->terms, false});
        case UnaryOp::Abs:
        case UnaryOp::Relu: return bounded(IndexBound{operand->terms, true});
        case UnaryOp::Floor:
        case UnaryOp::Ceil: return bounded(operand);
        default: return std::nullopt;
      }
    } else if constexpr (std::is_same_v<Node, Binary>) {
      std::optional<IndexBound> a = boundOf(*node.lhs, each), b = boundOf(*node.rhs, each);
      if (!a || !b || node.dtype != DType::I64) return std::nullopt;
      switch (node.op) {
        case BinaryOp::Add:
        case BinaryOp::Sub: {
          std::optional<IndexBound> operands = sum(*a, *b, node.op == BinaryOp::Add && a->nonnegative && b->nonnegative);
          return bounded(operands ? std::optional(tightenedByExactForm(node, *operands)) : std::nullopt);
        }
        case BinaryOp::Mul: return bounded(product(*a, *b));
        case BinaryOp::Div:
          if (std::optional<Monomial> divisor = monomialOf(*node.rhs))
            return bounded(quotient(*a, *divisor, a->nonnegative && b->nonnegative));
          // |a / b| <= |a| for any b but 0, whose quotient is 0.
          return bounded(IndexBound{a->terms, a->nonnegative && b->nonnegative});
        case BinaryOp::Mod:
          // The remainder has the dividend's sign, and is smaller than both (0 for a divisor of 0).
          if (std::optional<int64_t> divisor = constantOf(*node.rhs); divisor && *divisor != 0)
            return bounded(IndexBound{constantBound(*divisor == INT64_MIN ? INT64_MAX : std::llabs(*divisor) - 1).terms,
                                      a->nonnegative});
          return bounded(IndexBound{tighter(*a, *b).terms, a->nonnegative});
        case BinaryOp::Min:
          // Between the smaller operand and 0 where one is nonnegative: bounded by the other.
          if (a->nonnegative && b->nonnegative) return bounded(IndexBound{tighter(*a, *b).terms, true});
          if (a->nonnegative) return bounded(IndexBound{b->terms, false});
          if (b->nonnegative) return bounded(IndexBound{a->terms, false});
          return bounded(larger(*a, *b, false));
        case BinaryOp::Max: return bounded(larger(*a, *b, a->nonnegative || b->nonnegative));
        default: return std::nullopt;
      }
    } else if constexpr (std::is_same_v<Node, Select>) {
      boundOf(*node.condition, each);
      std::optional<IndexBound> a = boundOf(*node.ifTrue, each), b = boundOf(*node.ifFalse, each);
      if (!a || !b) return std::nullopt;
      return bounded(larger(*a, *b, a->nonnegative && b->nonnegative));
    } else if constexpr (std::is_same_v<Node, Cast>) {
      boundOf(*node.operand, each);
      return std::nullopt;
    } else {
      static_assert(std::is_same_v<Node, FloatImm> || std::is_same_v<Node, BoolImm> || std::is_same_v<Node, ScalarParam>,
                    "an expression IndexArithmetic does not know");
      return std::nullopt;
    }
  });
}

std::optional<IndexBound> IndexArithmetic::define(const For& loop) {
  std::optional<IndexBound> begin = boundOf(*loop.begin), end = boundOf(*loop.end), step = boundOf(*loop.step);
  std::optional<IndexBound> var, increment;
  if (begin && end && step) {
    // In the body begin <= var < end: from 0 to the end when the begin is nonnegative.
    var = begin->nonnegative ? IndexBound{end->terms, true} : larger(*begin, *end, false);
    increment = sum(*var, *step, false);
  }
  if (!increment) var.reset();
  defineVariable(loop.var, var, std::nullopt);
  return increment;
}

void IndexArithmetic::define(const Let& let) {
  defineVariable(let.var, boundOf(*let.value), exactFormOf(*let.value, kExactFormLevels));
}

namespace {

// Every index value of a function body, its loops' increments included.
class BoundCollector {
public:
  explicit BoundCollector(const Function& function) : indices_(function) {}

  void expression(const ExprPtr& e) {
    if (e) indices_.boundOf(*e, [&](const IndexBound& bound) { note(bound); });
  }
  void statement(const Stmt& stmt) {
    dispatch(stmt, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, For>) {
        expression(node.begin), expression(node.end), expression(node.step);
        indices_.openScope();
        if (std::optional<IndexBound> increment = indices_.define(node)) note(*increment);
        statement(*node.body);
        indices_.closeScope();
      } else if constexpr (std::is_same_v<Node, Let>) {
        expression(node.value);
        indices_.define(node);
      } else if constexpr (std::is_same_v<Node, If>) {
        expression(node.condition);
        scoped(*node.body);
      } else if constexpr (std::is_same_v<Node, IfAligned>) {
        for (const Address& address : node.addresses) expression(address.element);
        expression(node.condition);
        scoped(*node.aligned), scoped(*node.otherwise);
      } else if constexpr (std::is_same_v<Node, Block>) {
        indices_.openScope();
        for (const StmtPtr& inner : node.stmts) statement(*inner);
        indices_.closeScope();
      } else {
        forEachExpr(node, [&](const ExprPtr& e) { expression(e); });
      }
    });
  }
  const IndexBound& most() const { return most_; }

private:
  void scoped(const Stmt& body) {
    indices_.openScope();
    statement(body);
    indices_.closeScope();
  }
  void note(const IndexBound& bound) { most_ = larger(most_, bound, true); }

  IndexArithmetic indices_;
  IndexBound most_{{}, true};
};

ExprPtr f64(ExprPtr e) { return std::make_shared<Cast>(DType::F64, std::move(e)); }

}  // namespace

IndexBound indexBoundOf(const Function& function) {
  BoundCollector collector(function);
  for (const Function::SizedAtLaunch& sized : function.sharedSizedAtLaunch()) collector.expression(sized.offset);
  collector.statement(*function.body);
  return collector.most();
}

ExprPtr indexLimit() { return std::make_shared<AxisVar>(kIndexLimitName); }
bool isIndexLimit(const std::string& name) { return name == kIndexLimitName; }

ExprPtr indicesFit(const IndexBound& bound) {
  ExprPtr total;
  for (const auto& [monomial, coefficient] : bound.terms) {
    ExprPtr term = coefficient == 1 && !monomial.empty() ? nullptr : std::make_shared<FloatImm>(DType::F64, coefficient);
    for (const std::string& size : monomial) {
      // A derived size may be negative (its kernels then compute nothing, but they are launched).
      ExprPtr factor = f64(std::make_shared<SizeVar>(size));
      if (isDerivedSizeName(size)) factor = std::make_shared<Unary>(DType::F64, UnaryOp::Abs, factor);
      term = term ? std::make_shared<Binary>(DType::F64, BinaryOp::Mul, term, factor) : factor;
    }
    total = total ? std::make_shared<Binary>(DType::F64, BinaryOp::Add, total, term) : term;
  }
  if (!total) total = std::make_shared<FloatImm>(DType::F64, 0.0);
  return std::make_shared<Binary>(DType::Bool, BinaryOp::Le, total, f64(indexLimit()));
}

Program chooseIndexWidths(const Program& program) {
  Program result = program;
  result.functions.clear();
  for (const Function& function : program.functions) {
    if (function.narrowestIndexBits == 64) {
      result.functions.push_back(function);
      continue;
    }
    IndexBound bound = indexBoundOf(function);
    auto constant = bound.terms.find({});
    bool variable = std::any_of(bound.terms.begin(), bound.terms.end(), [](const auto& term) { return !term.first.empty(); });
    if (constant != bound.terms.end() && constant->second > kIndexLimit) {
      result.functions.push_back(function);  // never fits
      continue;
    }
    Function narrow = function;
    narrow.indexBits = 32;
    if (!variable) {
      result.functions.push_back(narrow);  // always fits
      continue;
    }
    narrow.indicesFit = indicesFit(bound);
    Function wide = function;
    wide.name = function.name + kWideTwinSuffix;
    wide.indicesFit = narrow.indicesFit;
    result.functions.push_back(std::move(narrow));
    result.functions.push_back(std::move(wide));
  }
  return result;
}

}  // namespace emmy::kernel
