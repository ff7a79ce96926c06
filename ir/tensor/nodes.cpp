#include "ir/tensor/nodes.h"

#include <algorithm>

#include <fmt/format.h>

namespace emmy::tensor {

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
  std::string out;
  if (factor != 1 || sizes.empty()) out = fmt::format("{}", factor);
  for (const std::string& name : sizes) out += (out.empty() ? "" : "*") + name;
  return out;
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
  return out;
}

const Stage* Kernel::findStage(const std::string& stageName) const {
  for (const Stage& stage : stages)
    if (stage.name == stageName) return &stage;
  return nullptr;
}

const TensorParam* Kernel::findInput(const std::string& inputName) const {
  for (const TensorParam& input : inputs)
    if (input.name == inputName) return &input;
  return nullptr;
}

}  // namespace emmy::tensor
