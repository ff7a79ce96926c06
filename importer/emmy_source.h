// The .emmy source the importer writes: one kernel in whole-tensor form (index form where a statement
// needs its indices), held as a small syntax tree and printed with only the parentheses the grammar
// needs. Sizes the importer could not know when it wrote a shape are size names that unification may
// later equate with each other or with a number; they are resolved when the program is printed.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ir/tensor/nodes.h"
#include "support/dtype.h"

namespace emmy::importer {

struct Code;
using CodePtr = std::shared_ptr<const Code>;

// An expression of the .emmy language.
struct Code {
  enum class Kind { Name, Number, Size, Unary, Binary, Call, List, Subscript, Reduction };
  Kind kind = Kind::Name;
  std::string text;               // Name: the name; Number: its spelling; Unary, Binary: the operator;
                                  // Call: the callee; Subscript: the tensor; Reduction: `sum`, `max`, ...
  tensor::Dim size;               // Size: a dimension (an i64 value, or an entry of a shape list)
  std::vector<CodePtr> operands;  // Unary, Binary: the operands; Call: positional arguments; List,
                                  // Subscript: the elements, the subscripts; Reduction: the body
  std::vector<std::pair<std::string, CodePtr>> keywords;  // Call: `axis=-1`, ...; Subscript: the fill of a
                                                          // pad; Reduction: each index and its bound
};

CodePtr nameCode(std::string name);
// A number literal; a negative one is a negation of its magnitude. `integer` spells it without a point.
CodePtr numberCode(double value, bool integer);
CodePtr sizeCode(tensor::Dim size);
CodePtr unaryCode(std::string op, CodePtr operand);  // "-" or "not"
CodePtr binaryCode(std::string op, CodePtr lhs, CodePtr rhs);
CodePtr callCode(std::string callee, std::vector<CodePtr> arguments,
                 std::vector<std::pair<std::string, CodePtr>> keywords = {});
CodePtr listCode(std::vector<CodePtr> elements);
CodePtr subscriptCode(std::string tensor, std::vector<CodePtr> subscripts);
// `pad(tensor, fill)[subscripts]`: reads `fill` outside the tensor.
CodePtr paddedSubscriptCode(std::string tensor, CodePtr fill, std::vector<CodePtr> subscripts);
// `op[k < bound, ...](body)`: an index-form reduction whose indices carry their bounds.
CodePtr reductionCode(std::string op, std::vector<std::pair<std::string, CodePtr>> bounds, CodePtr body);

// Size names and what unification has made of them: the same as an earlier name, or a number.
class SizeNames {
public:
  void add(const std::string& name);
  // `a` and `b` made the same dimension. False when they cannot be: two different numbers, or
  // products of sizes that differ (only a single size name is ever bound).
  bool unify(const tensor::Dim& a, const tensor::Dim& b);
  tensor::Dim resolve(const tensor::Dim& dim) const;
  tensor::Shape resolve(const tensor::Shape& shape) const;

private:
  std::string representative(const std::string& name) const;
  std::map<std::string, std::string> sameAs_;   // a name unified with an earlier one
  std::map<std::string, int64_t> value_;        // a representative bound to a number
  std::map<std::string, size_t> order_;         // the older name represents a class
};

struct Declaration {
  std::string name;
  DType dtype = DType::F32;
  tensor::Shape shape;
  bool scalar = false;  // a scalar parameter (`alpha: f32`), not a tensor
};

struct Statement {
  std::string target;
  std::vector<std::string> indices;  // index form when not empty, or when `value` is a Reduction
  CodePtr value;
  tensor::Shape ranges;  // written as `i < RANGE` when given (one per index)
};

struct Program {
  std::string origin;  // the model's file name, for the header comment
  std::vector<std::string> imports;
  std::string kernel;
  std::vector<Declaration> inputs, outputs;
  std::vector<Statement> statements;
};

// The program as .emmy text, every size resolved through `sizes`.
std::string printProgram(const Program& program, const SizeNames& sizes);

}  // namespace emmy::importer
