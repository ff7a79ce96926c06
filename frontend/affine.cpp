#include "frontend/affine.h"

#include <algorithm>
#include <functional>
#include <numeric>

namespace emmy {

using namespace tensor;

namespace {

template <typename Map>
void addScaled(Map& into, const Map& from, int64_t factor) {
  for (const auto& [key, coefficient] : from) {
    int64_t& slot = into[key];
    slot += coefficient * factor;
    if (slot == 0) into.erase(key);
  }
}

}  // namespace

AffineForm AffineForm::ofDim(const Dim& dim) {
  AffineForm form;
  if (dim.sizes.empty())
    form.constant = dim.factor;
  else
    form.sizes[dim.sizes] = dim.factor;
  return form;
}

AffineForm AffineForm::ofPolynomial(const SizePolynomial& polynomial) {
  AffineForm form;
  for (const auto& [monomial, coefficient] : polynomial.terms) (monomial.empty() ? form.constant : form.sizes[monomial]) = coefficient;
  return form;
}

AffineForm AffineForm::operator+(const AffineForm& other) const {
  AffineForm sum = *this;
  addScaled(sum.indices, other.indices, 1);
  addScaled(sum.sizes, other.sizes, 1);
  sum.constant += other.constant;
  return sum;
}

AffineForm AffineForm::operator-(const AffineForm& other) const { return *this + other.scaled(-1); }

AffineForm AffineForm::scaled(int64_t factor) const {
  AffineForm result;
  addScaled(result.indices, indices, factor);
  addScaled(result.sizes, sizes, factor);
  result.constant = constant * factor;
  return result;
}

namespace {

// A form with only a constant and size monomials, multiplied by another such form.
std::optional<AffineForm> multiplySizeForms(const AffineForm& a, const AffineForm& b) {
  if (a.hasIndices() || b.hasIndices()) {
    // An index may only be scaled by a constant.
    if (!a.sizes.empty() || !b.sizes.empty()) return std::nullopt;
    if (a.hasIndices() && b.hasIndices()) return std::nullopt;
    return a.hasIndices() ? a.scaled(b.constant) : b.scaled(a.constant);
  }
  AffineForm product;
  product.constant = a.constant * b.constant;
  auto addTerm = [&](std::vector<std::string> key, int64_t coefficient) {
    std::sort(key.begin(), key.end());
    product.sizes[key] += coefficient;
    if (product.sizes[key] == 0) product.sizes.erase(key);
  };
  for (const auto& [key, c] : a.sizes) addTerm(key, c * b.constant);
  for (const auto& [key, c] : b.sizes) addTerm(key, c * a.constant);
  for (const auto& [ka, ca] : a.sizes)
    for (const auto& [kb, cb] : b.sizes) {
      std::vector<std::string> key = ka;
      key.insert(key.end(), kb.begin(), kb.end());
      addTerm(key, ca * cb);
    }
  return product;
}

}  // namespace

std::optional<AffineForm> affineOf(const Expr& expr) {
  if (!isInteger(expr.dtype)) return std::nullopt;
  if (const auto* imm = expr.as<IntImm>()) return AffineForm{{}, {}, imm->value};
  if (const auto* axis = expr.as<AxisVar>()) return AffineForm{{{axis->name, 1}}, {}, 0};
  if (const auto* size = expr.as<SizeVar>()) return AffineForm{{}, {{{size->name}, 1}}, 0};
  if (const auto* cast = expr.as<Cast>()) {
    // Widening integer casts keep the value.
    if (isInteger(cast->operand->dtype) && dtypeBytes(cast->dtype) >= dtypeBytes(cast->operand->dtype))
      return affineOf(*cast->operand);
    return std::nullopt;
  }
  if (const auto* unary = expr.as<Unary>()) {
    if (unary->op != UnaryOp::Neg) return std::nullopt;
    auto operand = affineOf(*unary->operand);
    return operand ? std::optional(operand->scaled(-1)) : std::nullopt;
  }
  if (const auto* binary = expr.as<Binary>()) {
    auto lhs = affineOf(*binary->lhs);
    auto rhs = affineOf(*binary->rhs);
    if (!lhs || !rhs) return std::nullopt;
    switch (binary->op) {
      case BinaryOp::Add: return *lhs + *rhs;
      case BinaryOp::Sub: return *lhs - *rhs;
      case BinaryOp::Mul: return multiplySizeForms(*lhs, *rhs);
      default: return std::nullopt;
    }
  }
  return std::nullopt;
}

void collectFacts(const Expr& condition, bool taken, std::vector<AffineForm>& facts) {
  if (const auto* unary = condition.as<Unary>(); unary && unary->op == UnaryOp::Not) {
    collectFacts(*unary->operand, !taken, facts);
    return;
  }
  const auto* binary = condition.as<Binary>();
  if (!binary) return;
  if (binary->op == BinaryOp::And && taken) {
    collectFacts(*binary->lhs, true, facts);
    collectFacts(*binary->rhs, true, facts);
    return;
  }
  if (binary->op == BinaryOp::Or && !taken) {  // not (a or b) = not a and not b
    collectFacts(*binary->lhs, false, facts);
    collectFacts(*binary->rhs, false, facts);
    return;
  }
  if (!isComparison(binary->op)) return;
  auto lhs = affineOf(*binary->lhs);
  auto rhs = affineOf(*binary->rhs);
  if (!lhs || !rhs) return;
  BinaryOp op = binary->op;
  if (!taken) {
    switch (op) {
      case BinaryOp::Lt: op = BinaryOp::Ge; break;
      case BinaryOp::Le: op = BinaryOp::Gt; break;
      case BinaryOp::Gt: op = BinaryOp::Le; break;
      case BinaryOp::Ge: op = BinaryOp::Lt; break;
      case BinaryOp::Eq: op = BinaryOp::Ne; break;
      case BinaryOp::Ne: op = BinaryOp::Eq; break;
      default: return;
    }
  }
  AffineForm one{{}, {}, 1};
  switch (op) {
    case BinaryOp::Lt: facts.push_back(*rhs - *lhs - one); break;
    case BinaryOp::Le: facts.push_back(*rhs - *lhs); break;
    case BinaryOp::Gt: facts.push_back(*lhs - *rhs - one); break;
    case BinaryOp::Ge: facts.push_back(*lhs - *rhs); break;
    case BinaryOp::Eq:
      facts.push_back(*lhs - *rhs);
      facts.push_back(*rhs - *lhs);
      break;
    default: break;
  }
}

BoundsProver::BoundsProver(std::map<std::string, Dim> extents, std::vector<AffineForm> facts,
                           const std::vector<DerivedSize>& derivedSizes, int64_t smallestSize)
    : facts_(std::move(facts)), derivedSizes_(derivedSizes), smallestSize_(smallestSize) {
  AffineForm one{{}, {}, 1};
  for (const auto& [index, extent] : extents) {
    lowerBounds_[index].push_back(AffineForm{});
    upperBounds_[index].push_back(AffineForm::ofDim(extent) - one);
  }
  // A fact `c*i + R >= 0` with c = +-1 and R free of indices bounds i by -R (c = 1) or R (c = -1).
  for (const AffineForm& fact : facts_) {
    if (fact.indices.size() != 1) continue;
    const auto& [index, coefficient] = *fact.indices.begin();
    if (!lowerBounds_.count(index)) continue;
    AffineForm rest = fact;
    rest.indices.clear();
    if (coefficient == 1) lowerBounds_[index].push_back(rest.scaled(-1));
    if (coefficient == -1) upperBounds_[index].push_back(rest);
  }
}

// form >= 0 for every size >= smallestSize, for a form over sizes alone: every monomial grows with its
// sizes, so non-negative coefficients make the minimum the value at all sizes = smallestSize (1 or 0). A derived size is replaced by its
// definition first (the latest first, as it may use earlier ones), a quotient q = floor(n / c) by a bound
// that keeps the claim (c*q <= n, c*q >= n - c + 1); one that remains (inside a product, or over a
// denominator that is not a positive constant), which may be 0 or negative, fails the proof. A minimum
// where the claim needs it small, or a maximum where it needs it large, is replaced by either operand.
bool BoundsProver::sizeFormNonNegative(AffineForm form) const {
  for (auto derived = derivedSizes_.rbegin(); derived != derivedSizes_.rend(); ++derived) {
    auto term = form.sizes.find({derived->name});
    if (term == form.sizes.end()) continue;
    if (derived->kind != DerivedSize::Kind::Quotient) {
      int64_t coefficient = term->second;
      if ((derived->kind == DerivedSize::Kind::Minimum) != (coefficient < 0)) return false;
      form.sizes.erase(term);
      return std::any_of(derived->operands.begin(), derived->operands.end(), [&](const SizePolynomial& operand) {
        return sizeFormNonNegative(form + AffineForm::ofPolynomial(operand * SizePolynomial::constant(coefficient)));
      });
    }
    std::optional<int64_t> divisor = derived->denominator.constantValue();
    if (!divisor || *divisor < 1) return false;
    // form >= 0 exactly when a positive multiple of it is: scale it until c divides q's coefficient.
    form = form.scaled(*divisor / std::gcd(term->second, *divisor));
    term = form.sizes.find({derived->name});
    int64_t coefficient = term->second;
    form.sizes.erase(term);
    SizePolynomial replacement = derived->numerator;
    if (coefficient > 0) replacement = replacement - SizePolynomial::constant(*divisor - 1);
    form = form + AffineForm::ofPolynomial(replacement * SizePolynomial::constant(coefficient / *divisor));
  }
  int64_t atOnes = form.constant;
  for (const auto& [monomial, coefficient] : form.sizes) {
    for (const std::string& size : monomial)
      if (std::any_of(derivedSizes_.begin(), derivedSizes_.end(), [&](const DerivedSize& d) { return d.name == size; }))
        return false;  // a derived size inside a product
    if (coefficient < 0) return false;
    if (smallestSize_ > 0) atOnes += coefficient;
  }
  return atOnes >= 0;
}

bool BoundsProver::provesByIntervals(const AffineForm& form) const {
  // Replace each index by one of its bounds (the lower for a positive coefficient); any choice that
  // leaves a provably non-negative size form proves the claim. Scopes are small, so enumerate.
  std::vector<std::pair<std::string, int64_t>> terms(form.indices.begin(), form.indices.end());
  AffineForm base = form;
  base.indices.clear();
  std::function<bool(size_t, const AffineForm&)> search = [&](size_t k, const AffineForm& partial) {
    if (k == terms.size()) return sizeFormNonNegative(partial);
    const auto& [index, coefficient] = terms[k];
    auto bounds = coefficient > 0 ? lowerBounds_.find(index) : upperBounds_.find(index);
    if (bounds == (coefficient > 0 ? lowerBounds_.end() : upperBounds_.end())) return false;
    for (const AffineForm& bound : bounds->second)
      if (search(k + 1, partial + bound.scaled(coefficient))) return true;
    return false;
  };
  return search(0, base);
}

bool BoundsProver::provesNonNegative(const AffineForm& form) const {
  if (provesByIntervals(form)) return true;
  // form = fact + rest with rest >= 0 also proves it (conditions over several indices).
  for (const AffineForm& fact : facts_)
    if (provesByIntervals(form - fact)) return true;
  return false;
}

}  // namespace emmy
