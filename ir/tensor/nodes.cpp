#include "ir/tensor/nodes.h"

#include <algorithm>

#include <fmt/format.h>

namespace emmy::tensor {

bool isDerivedSizeName(const std::string& name) { return name.find_first_of(" /()+-*") != std::string::npos; }

namespace {

// A size name as a factor of a product: a derived one in parentheses.
std::string factorText(const std::string& name) { return isDerivedSizeName(name) ? "(" + name + ")" : name; }

}  // namespace

Dim Dim::operator*(const Dim& other) const {
  Dim product{factor * other.factor, sizes};
  product.sizes.insert(product.sizes.end(), other.sizes.begin(), other.sizes.end());
  std::sort(product.sizes.begin(), product.sizes.end());
  return product;
}

std::optional<Dim> Dim::dividedBy(const Dim& other) const {
  if (other.factor == 0 || factor % other.factor != 0) return std::nullopt;
  Dim quotient{factor / other.factor, sizes};
  for (const std::string& name : other.sizes) {
    auto it = std::find(quotient.sizes.begin(), quotient.sizes.end(), name);
    if (it == quotient.sizes.end()) return std::nullopt;
    quotient.sizes.erase(it);
  }
  return quotient;
}

std::string Dim::toString() const {
  if (factor == 1 && sizes.size() == 1) return sizes[0];
  std::string out;
  if (factor != 1 || sizes.empty()) out = fmt::format("{}", factor);
  for (const std::string& name : sizes) out += (out.empty() ? "" : "*") + factorText(name);
  return out;
}

SizePolynomial SizePolynomial::constant(int64_t value) {
  SizePolynomial p;
  if (value != 0) p.terms[{}] = value;
  return p;
}

SizePolynomial SizePolynomial::of(const Dim& dim) {
  SizePolynomial p;
  if (dim.factor != 0) p.terms[dim.sizes] = dim.factor;
  return p;
}

SizePolynomial SizePolynomial::operator+(const SizePolynomial& other) const {
  SizePolynomial sum = *this;
  for (const auto& [monomial, coefficient] : other.terms)
    if ((sum.terms[monomial] += coefficient) == 0) sum.terms.erase(monomial);
  return sum;
}

SizePolynomial SizePolynomial::operator-(const SizePolynomial& other) const {
  return *this + other * constant(-1);
}

SizePolynomial SizePolynomial::operator*(const SizePolynomial& other) const {
  SizePolynomial product;
  for (const auto& [a, ca] : terms)
    for (const auto& [b, cb] : other.terms) {
      std::vector<std::string> monomial = a;
      monomial.insert(monomial.end(), b.begin(), b.end());
      std::sort(monomial.begin(), monomial.end());
      if ((product.terms[monomial] += ca * cb) == 0) product.terms.erase(monomial);
    }
  return product;
}

std::optional<int64_t> SizePolynomial::constantValue() const {
  if (terms.empty()) return 0;
  if (terms.size() == 1 && terms.begin()->first.empty()) return terms.begin()->second;
  return std::nullopt;
}

std::optional<Dim> SizePolynomial::asDim() const {
  if (terms.size() != 1 || terms.begin()->second < 1) return std::nullopt;
  return Dim{terms.begin()->second, terms.begin()->first};
}

std::optional<SizePolynomial> SizePolynomial::dividedExactly(int64_t divisor) const {
  if (divisor == 0) return std::nullopt;
  SizePolynomial quotient;
  for (const auto& [monomial, coefficient] : terms) {
    if (coefficient % divisor != 0) return std::nullopt;
    quotient.terms[monomial] = coefficient / divisor;
  }
  return quotient;
}

std::vector<std::pair<std::vector<std::string>, int64_t>> SizePolynomial::orderedTerms() const {
  std::vector<std::pair<std::vector<std::string>, int64_t>> ordered;
  for (bool positive : {true, false})
    for (const auto& [monomial, coefficient] : terms)
      if (!monomial.empty() && (coefficient > 0) == positive) ordered.emplace_back(monomial, coefficient);
  if (auto it = terms.find({}); it != terms.end()) ordered.emplace_back(*it);
  return ordered;
}

std::string SizePolynomial::toString() const {
  if (terms.empty()) return "0";
  std::string out;
  for (const auto& [monomial, coefficient] : orderedTerms()) {
    std::string term = Dim{coefficient < 0 ? -coefficient : coefficient, monomial}.toString();
    out += out.empty() ? (coefficient < 0 ? "-" : "") + term : (coefficient < 0 ? " - " : " + ") + term;
  }
  return out;
}

std::string DerivedSize::definition() const {
  if (kind != Kind::Quotient)
    return fmt::format("{}({}, {})", kind == Kind::Minimum ? "min" : "max", operands[0].toString(), operands[1].toString());
  if (denominator == SizePolynomial::constant(1)) return numerator.toString();
  auto operand = [&](const SizePolynomial& p) {
    std::string text = p.toString();
    bool plain = p.terms.size() == 1 && p.terms.begin()->second == 1 && p.terms.begin()->first.size() == 1;
    return plain || p.constantValue() >= 0 ? text : "(" + text + ")";
  };
  return operand(numerator) + "/" + operand(denominator);
}

std::string shapeToString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + shape[i].toString();
  return out + "]";
}

const char* unaryOpName(UnaryOp op) {
  switch (op) {
#define EMMY_NAME_CASE(Op, name) \
  case UnaryOp::Op: return name;
    EMMY_UNARY_OPS(EMMY_NAME_CASE)
#undef EMMY_NAME_CASE
  }
  return "?";
}

const char* binaryOpName(BinaryOp op) {
  switch (op) {
#define EMMY_NAME_CASE(Op, name) \
  case BinaryOp::Op: return name;
    EMMY_BINARY_OPS(EMMY_NAME_CASE)
#undef EMMY_NAME_CASE
  }
  return "?";
}

bool isComparison(BinaryOp op) {
  return op == BinaryOp::Lt || op == BinaryOp::Le || op == BinaryOp::Gt || op == BinaryOp::Ge ||
         op == BinaryOp::Eq || op == BinaryOp::Ne;
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
#define EMMY_NAME_CASE(Op, name) \
  case ReduceOp::Op: return name;
    EMMY_REDUCE_OPS(EMMY_NAME_CASE)
#undef EMMY_NAME_CASE
  }
  return "?";
}

Shape Stage::shape() const {
  Shape shape;
  for (const Axis& axis : axes) shape.push_back(axis.extent);
  return shape;
}

std::string Kernel::instanceName() const {
  std::string out = name;
  for (const auto& [param, dtype] : typeArguments) out += fmt::format("_{}", dtypeName(dtype));
  for (const auto& [param, value] : integerArguments)
    out += fmt::format("_{}{}", param, value < 0 ? "m" + std::to_string(value).substr(1) : std::to_string(value));
  return out;
}

std::string Kernel::selector() const {
  std::vector<std::string> arguments;
  for (const auto& [param, dtype] : typeArguments) arguments.emplace_back(dtypeName(dtype));
  for (const auto& [param, value] : integerArguments) arguments.push_back(fmt::format("{}={}", param, value));
  if (arguments.empty()) return name;
  std::string out = name + "<";
  for (size_t k = 0; k < arguments.size(); ++k) out += (k ? ", " : "") + arguments[k];
  return out + ">";
}

const DerivedSize* Kernel::findDerivedSize(const std::string& sizeName) const {
  for (const DerivedSize& size : derivedSizes)
    if (size.name == sizeName) return &size;
  return nullptr;
}

std::vector<std::string> Kernel::allSizes() const {
  std::vector<std::string> all = sizes;
  for (const DerivedSize& size : derivedSizes) all.push_back(size.name);
  return all;
}

const Stage* Kernel::findStage(const std::string& stageName) const {
  for (const Stage& stage : stages)
    if (stage.name == stageName) return &stage;
  return nullptr;
}

bool Kernel::isOutput(const std::string& name) const {
  return std::any_of(outputs.begin(), outputs.end(), [&](const TensorParam& output) { return output.name == name; });
}

const TensorParam* Kernel::findInput(const std::string& inputName) const {
  for (const TensorParam& input : inputs)
    if (input.name == inputName) return &input;
  return nullptr;
}

}  // namespace emmy::tensor
