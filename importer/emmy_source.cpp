#include "importer/emmy_source.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "support/diagnostics.h"

namespace emmy::importer {

using tensor::Dim;
using tensor::Shape;

namespace {

CodePtr make(Code code) { return std::make_shared<const Code>(std::move(code)); }

// Binding strength, loosest first, as in grammar/Emmy.g4.
constexpr int kOr = 1, kAnd = 2, kNot = 3, kComparison = 4, kAdditive = 5, kMultiplicative = 6, kNegation = 7,
              kAtom = 8;

int binaryPrecedence(const std::string& op) {
  if (op == "or") return kOr;
  if (op == "and") return kAnd;
  if (op == "+" || op == "-") return kAdditive;
  if (op == "*" || op == "/" || op == "%" || op == "@") return kMultiplicative;
  return kComparison;
}

class Printer {
public:
  explicit Printer(const SizeNames& sizes) : sizes_(sizes) {}

  std::string print(const Code& code) { return text(code).first; }

  std::string dim(const Dim& size) const { return sizes_.resolve(size).toString(); }

private:
  // The text and how tightly it binds.
  std::pair<std::string, int> text(const Code& code) {
    switch (code.kind) {
      case Code::Kind::Name:
      case Code::Kind::Number:
        return {code.text, kAtom};
      case Code::Kind::Size: {
        Dim resolved = sizes_.resolve(code.size);
        bool product = resolved.sizes.size() + (resolved.factor != 1 ? 1 : 0) > 1;
        return {resolved.toString(), product ? kMultiplicative : kAtom};
      }
      case Code::Kind::Unary: {
        int own = code.text == "not" ? kNot : kNegation;
        auto [operand, strength] = text(*code.operands[0]);
        std::string spaced = code.text == "not" ? "not " : code.text;
        return {spaced + (strength < own ? "(" + operand + ")" : operand), own};
      }
      case Code::Kind::Binary: {
        int own = binaryPrecedence(code.text);
        auto [lhs, left] = text(*code.operands[0]);
        auto [rhs, right] = text(*code.operands[1]);
        // Left-associative; comparisons do not chain.
        if (left < own || (own == kComparison && left == own)) lhs = "(" + lhs + ")";
        if (right <= own) rhs = "(" + rhs + ")";
        return {lhs + " " + code.text + " " + rhs, own};
      }
      case Code::Kind::Call: {
        std::vector<std::string> arguments;
        for (const CodePtr& argument : code.operands) arguments.push_back(print(*argument));
        for (const auto& [keyword, value] : code.keywords) arguments.push_back(keyword + "=" + print(*value));
        return {code.text + "(" + fmt::format("{}", fmt::join(arguments, ", ")) + ")", kAtom};
      }
      case Code::Kind::List:
      case Code::Kind::Subscript: {
        std::vector<std::string> elements;
        for (const CodePtr& element : code.operands) elements.push_back(print(*element));
        std::string base = code.text;
        if (!code.keywords.empty()) base = "pad(" + base + ", " + print(*code.keywords[0].second) + ")";
        return {base + "[" + fmt::format("{}", fmt::join(elements, ", ")) + "]", kAtom};
      }
      case Code::Kind::Reduction: {
        std::vector<std::string> bounds;
        for (const auto& [index, bound] : code.keywords) bounds.push_back(index + " < " + print(*bound));
        return {fmt::format("{}[{}]({})", code.text, fmt::join(bounds, ", "), print(*code.operands[0])), kAtom};
      }
    }
    EMMY_INTERNAL_ASSERT(false, "unknown code kind");
  }

  const SizeNames& sizes_;
};

std::string declaration(const Declaration& d, Printer& printer) {
  if (d.scalar) return fmt::format("{}: {}", d.name, dtypeName(d.dtype));
  std::vector<std::string> dims;
  for (const Dim& size : d.shape) dims.push_back(printer.dim(size));
  return fmt::format("{}: {}[{}]", d.name, dtypeName(d.dtype), fmt::join(dims, ", "));
}

// `(a, b)` on one line when it fits, else one entry a line.
std::string parenthesised(const std::vector<std::string>& entries, size_t room) {
  std::string oneLine = fmt::format("({})", fmt::join(entries, ", "));
  if (oneLine.size() <= room) return oneLine;
  return fmt::format("(\n    {}\n)", fmt::join(entries, ",\n    "));
}

}  // namespace

CodePtr nameCode(std::string name) { return make({Code::Kind::Name, std::move(name), {}, {}, {}}); }

CodePtr numberCode(double value, bool integer) {
  EMMY_INTERNAL_ASSERT(!std::isnan(value), "a NaN literal");
  if (std::signbit(value) && value != 0) return unaryCode("-", numberCode(-value, integer));
  std::string spelling;
  if (std::isinf(value)) {
    spelling = "inf";
  } else if (integer) {
    spelling = fmt::format("{}", static_cast<int64_t>(value));
  } else {
    spelling = fmt::format("{}", value);  // the shortest text that reads back as the same double
    if (spelling.find_first_of(".e") == std::string::npos) spelling += ".0";
  }
  return make({Code::Kind::Number, spelling, {}, {}, {}});
}

CodePtr sizeCode(Dim size) {
  return make({Code::Kind::Size, "", std::move(size), {}, {}});
}

CodePtr unaryCode(std::string op, CodePtr operand) { return make({Code::Kind::Unary, std::move(op), {}, {std::move(operand)}, {}}); }

CodePtr binaryCode(std::string op, CodePtr lhs, CodePtr rhs) {
  return make({Code::Kind::Binary, std::move(op), {}, {std::move(lhs), std::move(rhs)}, {}});
}

CodePtr callCode(std::string callee, std::vector<CodePtr> arguments, std::vector<std::pair<std::string, CodePtr>> keywords) {
  return make({Code::Kind::Call, std::move(callee), {}, std::move(arguments), std::move(keywords)});
}

CodePtr listCode(std::vector<CodePtr> elements) { return make({Code::Kind::List, "", {}, std::move(elements), {}}); }

CodePtr subscriptCode(std::string tensor, std::vector<CodePtr> subscripts) {
  return make({Code::Kind::Subscript, std::move(tensor), {}, std::move(subscripts), {}});
}

CodePtr paddedSubscriptCode(std::string tensor, CodePtr fill, std::vector<CodePtr> subscripts) {
  return make({Code::Kind::Subscript, std::move(tensor), {}, std::move(subscripts), {{"pad", std::move(fill)}}});
}

CodePtr reductionCode(std::string op, std::vector<std::pair<std::string, CodePtr>> bounds, CodePtr body) {
  return make({Code::Kind::Reduction, std::move(op), {}, {std::move(body)}, std::move(bounds)});
}

void SizeNames::add(const std::string& name) { order_.emplace(name, order_.size()); }

std::string SizeNames::representative(const std::string& name) const {
  std::string current = name;
  for (auto it = sameAs_.find(current); it != sameAs_.end(); it = sameAs_.find(current)) current = it->second;
  return current;
}

Dim SizeNames::resolve(const Dim& dim) const {
  Dim resolved = Dim::constant(dim.factor);
  for (const std::string& name : dim.sizes) {
    std::string base = representative(name);
    if (auto bound = value_.find(base); bound != value_.end())
      resolved = resolved * Dim::constant(bound->second);
    else
      resolved = resolved * Dim::size(base);
  }
  return resolved;
}

Shape SizeNames::resolve(const Shape& shape) const {
  Shape resolved;
  for (const Dim& dim : shape) resolved.push_back(resolve(dim));
  return resolved;
}

bool SizeNames::unify(const Dim& a, const Dim& b) {
  Dim x = resolve(a), y = resolve(b);
  if (x == y) return true;
  // A size computed from others (a window's count over a dim known at run time) is never bound.
  auto single = [](const Dim& d) { return d.factor == 1 && d.sizes.size() == 1 && !tensor::isDerivedSizeName(d.sizes[0]); };
  if (single(x) && y.isConstant()) return value_.emplace(x.sizes[0], y.factor), true;
  if (single(y) && x.isConstant()) return value_.emplace(y.sizes[0], x.factor), true;
  if (single(x) && single(y)) {
    // The name met first stays; the other becomes the same as it.
    const std::string &older = order_.at(x.sizes[0]) < order_.at(y.sizes[0]) ? x.sizes[0] : y.sizes[0];
    const std::string &newer = older == x.sizes[0] ? y.sizes[0] : x.sizes[0];
    sameAs_[newer] = older;
    return true;
  }
  return false;
}

std::string printProgram(const Program& program, const SizeNames& sizes) {
  Printer printer(sizes);
  std::string out = fmt::format("# Imported by Emmy from {}.\n", program.origin);
  for (const std::string& module : program.imports) out += "import " + module + "\n";
  out += "\n";
  std::vector<std::string> inputs, outputs;
  for (const Declaration& input : program.inputs) inputs.push_back(declaration(input, printer));
  for (const Declaration& output : program.outputs) outputs.push_back(declaration(output, printer));
  std::string head = "kernel " + program.kernel;
  out += head + parenthesised(inputs, 100 - head.size()) + " -> " + parenthesised(outputs, 80) + " {\n";
  for (const Statement& statement : program.statements) {
    std::string target = statement.target;
    std::vector<std::string> indices = statement.indices;
    for (size_t k = 0; k < statement.ranges.size(); ++k) indices[k] += " < " + printer.dim(statement.ranges[k]);
    // A rank-0 stage whose value is an index-form reduction is in index form too: `d[] = sum[i < N](...)`.
    if (!indices.empty() || statement.value->kind == Code::Kind::Reduction) target += fmt::format("[{}]", fmt::join(indices, ", "));
    out += fmt::format("    {} = {}\n", target, printer.print(*statement.value));
  }
  out += "}\n";
  return out;
}

}  // namespace emmy::importer
