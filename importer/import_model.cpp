// Loading a TorchScript model and walking forward's graph into .emmy source (importer/ARCHITECTURE.md).
#include "importer/import_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>
#include <torch/csrc/jit/frontend/source_range.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/lower_tuples.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/script.h>

#include "frontend/frontend.h"
#include "importer/emmy_source.h"
#include "ir/tensor/build.h"
#include "support/npy.h"
#include "support/text.h"

namespace emmy::importer {

namespace fs = std::filesystem;
using tensor::Dim;
using tensor::Shape;
using tensor::SizePolynomial;
using torch::jit::Node;
using torch::jit::Value;

class LoadedModel {
public:
  std::string path;
  torch::jit::Module module;  // frozen: parameters and buffers stay attributes
  std::shared_ptr<torch::jit::Graph> graph;
  std::vector<std::string> argumentNames;  // forward's, from its schema, without self
};

void LoadedModelDeleter::operator()(LoadedModel* model) const { delete model; }

namespace {

// The first line of a LibTorch error, without its C++ backtrace.
std::string firstLine(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  return line.empty() ? text : line;
}

std::optional<DType> dtypeOfScalarType(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Bool: return DType::Bool;
    case c10::ScalarType::Char: return DType::I8;
    case c10::ScalarType::Int: return DType::I32;
    case c10::ScalarType::Long: return DType::I64;
    case c10::ScalarType::Half: return DType::F16;
    case c10::ScalarType::BFloat16: return DType::BF16;
    case c10::ScalarType::Float: return DType::F32;
    case c10::ScalarType::Double: return DType::F64;
    default: return std::nullopt;
  }
}

c10::ScalarType scalarTypeOf(DType dtype) {
  switch (dtype) {
    case DType::Bool: return c10::ScalarType::Bool;
    case DType::I8: return c10::ScalarType::Char;
    case DType::I32: return c10::ScalarType::Int;
    case DType::I64: return c10::ScalarType::Long;
    case DType::F16: return c10::ScalarType::Half;
    case DType::BF16: return c10::ScalarType::BFloat16;
    case DType::F32: return c10::ScalarType::Float;
    case DType::F64: return c10::ScalarType::Double;
  }
  return c10::ScalarType::Float;
}

// What a TorchScript value stands for while the graph is walked.
struct Item {
  enum class Kind { Tensor, Number, Size, List, None, Text, Module, Other };
  Kind kind = Kind::Other;
  // Tensor
  DType dtype = DType::F32;
  Shape shape;
  CodePtr code;
  // Number (bool, int or float), Size (an int that is a dimension: aten::size)
  double number = 0;
  bool integer = false, boolean = false;
  Dim size;
  // List and tuple
  std::vector<Item> elements;
  // Text (a string constant), Module (its attribute path), Other (what it is, for messages)
  std::string text;
  // A rank-0 tensor that is a number of forward's (a scalar parameter): it promotes as a Python number,
  // not as a tensor.
  bool wrapped = false;

  int rank() const { return static_cast<int>(shape.size()); }
  bool isScalar() const { return kind == Kind::Number || kind == Kind::Size; }
  bool isFloatScalar() const { return kind == Kind::Number && !integer && !boolean; }

  static Item tensor(DType dtype, Shape shape, CodePtr code) {
    Item item;
    item.kind = Kind::Tensor;
    item.dtype = dtype;
    item.shape = std::move(shape);
    item.code = std::move(code);
    return item;
  }
  static Item ofNumber(double value, bool integer, bool boolean = false) {
    Item item;
    item.kind = Kind::Number;
    item.number = value;
    item.integer = integer || boolean;
    item.boolean = boolean;
    return item;
  }
  static Item ofSize(const Dim& dim) {
    if (dim.isConstant()) return ofNumber(static_cast<double>(dim.factor), true);
    Item item;
    item.kind = Kind::Size;
    item.size = dim;
    return item;
  }
  static Item of(Kind kind, std::string text = "") {
    Item item;
    item.kind = kind;
    item.text = std::move(text);
    return item;
  }
};

// A user error at a node: the walk records it and goes on with the next node.
struct NodeError {
  std::string message;
};

[[noreturn]] void fail(std::string message) { throw NodeError{std::move(message)}; }

bool isIdentifier(const std::string& name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// Names the printed program must not define: keywords, types and builtins (a local name would shadow
// them), and the compiler's own names.
bool isReservedName(const std::string& name) {
  static const std::set<std::string> reserved = {
      "import", "fn", "kernel", "schedule", "and", "or", "not", "true", "false", "inf", "f16", "bf16", "f32",
      "f64", "i8", "i32", "i64", "bool", "exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "sin", "cos",
      "tanh", "erf", "sigmoid", "relu", "gelu", "silu", "floor", "ceil", "min", "max", "pow", "clamp", "where",
      "pad", "sum", "prod", "mean", "transpose", "permute", "reshape", "broadcast_to", "unsqueeze", "squeeze",
      "softmax", "log_softmax", "nn", "linalg"};
  return reserved.count(name) || name.find("__") != std::string::npos;
}

// The walk of one graph into one Program.
class Translator {
public:
  Translator(const LoadedModel& model, const ImportOptions& options, Diagnostics& diagnostics)
      : model_(model), options_(options), diagnostics_(diagnostics) {}

  std::optional<std::string> run();

private:
  // ---- names
  std::string claim(const std::string& wanted);
  std::string baseName(const Value* value) const;
  std::string sizeName(const std::string& proposed);
  void nameAttribute(const std::string& path);

  // ---- places in the TorchScript source
  // Where `range` is: a place in the model's file, or (source without a file) nothing, and the line quoted in
  // `quote`.
  SourceLoc locationOf(torch::jit::SourceRange range, std::string* quote);
  void report(const Node* node, const std::string& message);

  // ---- values
  const Item& item(const Value* value) const;
  const Item& input(const Node* node, const char* name) const;
  const Item* optionalInput(const Node* node, const char* name) const;
  void define(const Value* value, Item item, bool named = false);
  Item materialized(Item item, const std::string& hint);
  std::string emit(const std::string& wanted, CodePtr value, std::vector<std::string> indices = {});

  // ---- reading arguments
  static int64_t intOf(const Item& item, const char* what);
  static double numberOf(const Item& item, const char* what);
  static bool boolOf(const Item& item, const char* what);
  static std::vector<int64_t> intsOf(const Item& item, const char* what);
  static const Item& tensorOf(const Item& item, const char* what);
  static int axis(int64_t dim, int rank);
  static std::optional<DType> dtypeArgument(const Item* item);

  // ---- building code
  Shape broadcast(const Shape& a, const Shape& b);
  CodePtr operandCode(const Item& item, DType resultType) const;
  static CodePtr cast(DType dtype, const Item& tensor);
  Item castTo(DType dtype, const Item& tensor) const;
  static DType arithmeticType(const Item& a, const Item& b);
  Item elementwise(const std::string& op, const Item& a, const Item& b);
  Item scalarArithmetic(const std::string& op, const Item& a, const Item& b);
  // where(condition, a, b), and max or min of a and b (`callee`), of tensors and numbers (one at least a
  // tensor), promoted and broadcast as PyTorch does.
  Item select(const Item& condition, const Item& a, const Item& b);
  Item pairwise(const std::string& callee, const Item& a, const Item& b);
  Item function(const std::string& callee, const Item& x, bool floatOnly, std::vector<CodePtr> arguments = {});
  // A float function of the standard library's `nn` (`nn.elu(x, alpha)`), which the program then imports.
  Item nnFunction(const std::string& name, const Item& x, std::vector<CodePtr> arguments = {});
  Item matmul(const Item& a, const Item& b);
  Item reduce(const std::string& callee, const Item& x, const Item* dims, bool keepdim, std::optional<DType> dtype);
  Item reshape(const Item& x, const std::vector<Item>& entries);

  // The p-norm of `x` over `dims` (every dim without them): 2 as sqrt(sum(x * x)), 1, inf, -inf, or any
  // p > 0.
  Item norm(const Item& x, double p, const Item* dims, bool keepdim);
  // pairwise_distance: the p-norm of a - b + eps along the last dim.
  Item pairwiseDistance(const Node* node, const Item& a, const Item& b);

  // ---- the walk
  void declareInputs();
  Item attribute(const Node* node);
  void translateBlock(const torch::jit::Block* block);
  void translate(const Node* node);
  bool translateView(const std::string& kind, const Node* node);
  bool translateScalar(const std::string& kind, const Node* node);
  Item layerNorm(const Node* node);
  // (x - mean) * rsqrt(var + eps) over `axes` of `wide` (an f32 or f64 tensor), with mean and variance
  // those of the elements (the centred values and the variance are statements of their own).
  Item standardized(const Item& wide, const std::vector<int>& axes, double eps, const std::string& base);
  // A per-channel vector [C] beside a tensor of rank `rank` laid out [N, C, ...]: [C, 1, ...].
  static Item channelVector(const Item& vector, int rank);
  Item batchNorm(const std::string& kind, const Node* node);
  // An index-form statement defining `value` over `shape` (under the output's name where it is one):
  // `element` gives the value at the statement's indices (names claimed for it) from those indices' codes.
  Item indexed(const Value* value, DType dtype, const Shape& shape,
               const std::function<CodePtr(const std::vector<CodePtr>& indices)>& element);
  // The same under the name `target`.
  Item indexedAs(const std::string& target, DType dtype, const Shape& shape,
                 const std::function<CodePtr(const std::vector<CodePtr>& indices)>& element);
  bool translateIndexedView(const std::string& kind, const Node* node);
  // cat and stack of a list of tensors, in index form.
  bool translateJoin(const std::string& kind, const Node* node);
  // split, chunk and broadcast_tensors (lists of tensors) and repeat.
  bool translateSplit(const std::string& kind, const Node* node);
  // Convolutions (plain and transposed) and pools (max, average, adaptive) in index form.
  bool translateWindowed(const std::string& kind, const Node* node);
  Item convolution(const std::string& kind, const Node* node);
  Item pool(const std::string& kind, const Node* node);
  // An int[d] argument: d integers, or one that stands for every spatial dim (`int[2] stride=1`).
  static std::vector<int64_t> spatialInts(const Item& item, int dims, const char* what);
  // Dim `d` of `x` as a number: a weight's window, and the spatial dims of adaptive pools, are known when imported.
  int64_t knownExtent(const Item& x, int d, const std::string& op);
  // floor(reach / stride) + 1 windows over a dim: a number, or a size the kernel computes from a dim
  // known only at run time (`(H - 2)/2 + 1`, a derived size of the language, named by its definition).
  Dim windowCount(const SizePolynomial& reach, int64_t stride);
  Item einsum(const Node* node);
  Item loss(const std::string& kind, const Node* node);
  Item classLoss(const std::string& kind, const Node* node);
  Item attention(const Node* node);
  void declareOutputs();

  const LoadedModel& model_;
  const ImportOptions& options_;
  Diagnostics& diagnostics_;
  Program program_;
  SizeNames sizes_;
  tensor::Kernel derivedSizes_;  // holds the derived sizes windowCount makes, each made once
  std::set<std::string> taken_;
  std::map<const Value*, Item> items_;
  std::map<std::string, std::string> parameterNames_;  // attribute path -> input name
  std::map<std::string, Declaration> usedParameters_;  // input name -> declaration
  std::vector<std::string> tensorAttributeOrder_;      // the order of parameters and buffers
  std::map<const Value*, std::vector<std::string>> outputNames_;
  std::set<const Value*> poisoned_;                    // the results of nodes that failed
  std::map<const torch::jit::Source*, std::shared_ptr<const SourceFile>> sourceFiles_;
};

// ------------------------------------------------------------------------------------------------
// Names

std::string Translator::claim(const std::string& wanted) {
  std::string base = isIdentifier(wanted) && !isReservedName(wanted) ? wanted : "t";
  std::string name = base;
  for (int k = 1; taken_.count(name) || isReservedName(name); ++k) name = fmt::format("{}_{}", base, k);
  taken_.insert(name);
  return name;
}

// TorchScript's debug name without the `.N` that tells its versions apart (`h.1` is `h`); for an output
// without one, its output name (so that helper stages read `out_scores`).
std::string Translator::baseName(const Value* value) const {
  if (auto output = outputNames_.find(value); output != outputNames_.end() && !isIdentifier(value->debugName()))
    return output->second.front();
  if (!value->hasDebugName()) return "t";
  std::string name = value->debugName();
  if (size_t dot = name.find('.'); dot != std::string::npos) name = name.substr(0, dot);
  return isIdentifier(name) ? name : "t";
}

// A tensor attribute's input name: its path with `.` replaced by `_`.
void Translator::nameAttribute(const std::string& path) {
  if (parameterNames_.count(path)) return;
  std::string wanted = path;
  std::replace(wanted.begin(), wanted.end(), '.', '_');
  parameterNames_[path] = claim(wanted);
  tensorAttributeOrder_.push_back(parameterNames_[path]);
}

std::string Translator::sizeName(const std::string& proposed) {
  std::string name = claim(proposed);
  sizes_.add(name);
  return name;
}

// ------------------------------------------------------------------------------------------------
// Places

SourceLoc Translator::locationOf(torch::jit::SourceRange range, std::string* quote) {
  if (auto original = range.findSourceRangeThatGenerated()) range = *original;
  const std::shared_ptr<torch::jit::Source>& source = range.source();
  if (!source || range.size() == 0) return {};
  size_t lineIndex = source->lineno_for_offset(range.start());
  size_t column = range.start() - source->offset_for_line(lineIndex);
  std::string lineText = source->get_line(lineIndex).str();
  if (!lineText.empty() && lineText.back() == '\n') lineText.pop_back();
  auto fileLineColumn = range.file_line_col();
  if (!fileLineColumn || std::get<0>(*fileLineColumn).empty()) {
    // Source without a file (a module built with `define`): quote the line instead.
    size_t first = lineText.find_first_not_of(" \t");
    *quote = fmt::format(" (TorchScript line {}: {})", lineIndex + 1, first == std::string::npos ? "" : lineText.substr(first));
    return {};
  }
  int line = static_cast<int>(std::get<1>(*fileLineColumn));
  auto& file = sourceFiles_[source.get()];
  if (!file) {
    // SourceFile counts lines from the start of its text: pad to where this text starts in its file.
    int padding = std::max(0, line - 1 - static_cast<int>(lineIndex));
    file = std::make_shared<SourceFile>(std::get<0>(*fileLineColumn), std::string(padding, '\n') + source->text_str().str());
  }
  int length = static_cast<int>(std::min(range.size(), lineText.size() - std::min(lineText.size(), column)));
  return SourceLoc{file, line, static_cast<int>(column) + 1, std::max(1, length)};
}

void Translator::report(const Node* node, const std::string& message) {
  if (!node) return diagnostics_.error(SourceLoc{}, message);
  std::string quote;
  SourceLoc own = locationOf(node->sourceRange(), &quote);
  // An operation inlined from code forward calls (PyTorch's nn.functional, a module's forward) is
  // reported at forward's call, with its own line as a note.
  std::optional<torch::jit::SourceRange> call;
  if (auto stack = node->callstack())
    if (std::vector<torch::jit::InlinedCallStackEntry> calls = (*stack)->vec(); !calls.empty()) call = std::get<1>(calls.front());
  if (!call) return diagnostics_.error(own, message + quote);
  std::string callQuote;
  SourceLoc at = locationOf(*call, &callQuote);
  diagnostics_.error(at, message + callQuote, {Diagnostic{own, "where the code it calls does it" + quote, {}}});
}

// ------------------------------------------------------------------------------------------------
// Values

const Item& Translator::item(const Value* value) const {
  auto it = items_.find(value);
  EMMY_INTERNAL_ASSERT(it != items_.end(), "the value %{} is used before it is defined", value->debugName());
  return it->second;
}

const Item* Translator::optionalInput(const Node* node, const char* name) const {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (!schema || !schema->argumentIndexWithName(name)) return nullptr;
  return &item(node->namedInput(name));
}

const Item& Translator::input(const Node* node, const char* name) const {
  const Item* found = optionalInput(node, name);
  if (!found) fail(fmt::format("{} has no argument '{}' in the form this importer knows", node->kind().toQualString(), name));
  return *found;
}

// Records what `value` is. A tensor gets a statement of its own when it is used more than once, is an
// output, or `named` asks for one (matrix products, reductions: stages a schedule will name);
// otherwise its expression is written where it is used.
void Translator::define(const Value* value, Item result, bool named) {
  if (result.kind == Item::Kind::Tensor && result.code->kind != Code::Kind::Name) {
    auto output = outputNames_.find(value);
    if (output != outputNames_.end() || named || value->uses().size() > 1) {
      std::string target = output != outputNames_.end() ? output->second.front() : claim(baseName(value));
      program_.statements.push_back({target, {}, result.code, {}});
      result.code = nameCode(target);
    }
  }
  items_[value] = std::move(result);
}

std::string Translator::emit(const std::string& wanted, CodePtr value, std::vector<std::string> indices) {
  std::string target = claim(wanted);
  program_.statements.push_back({target, std::move(indices), std::move(value), {}});
  return target;
}

// `item` as a name, so that an expression can read it more than once.
Item Translator::materialized(Item item, const std::string& hint) {
  if (item.kind == Item::Kind::Tensor && item.code->kind != Code::Kind::Name) item.code = nameCode(emit(hint, item.code));
  return item;
}

// ------------------------------------------------------------------------------------------------
// Arguments

int64_t Translator::intOf(const Item& item, const char* what) {
  if (item.kind == Item::Kind::Number && item.integer) return static_cast<int64_t>(item.number);
  if (item.kind == Item::Kind::Size) fail(fmt::format("{} must be known when the model is imported, not the size {}", what, item.size.toString()));
  fail(fmt::format("{} must be an integer constant", what));
}

double Translator::numberOf(const Item& item, const char* what) {
  if (item.kind == Item::Kind::Number) return item.number;
  fail(fmt::format("{} must be a number known when the model is imported", what));
}

bool Translator::boolOf(const Item& item, const char* what) {
  if (item.kind == Item::Kind::Number && item.boolean) return item.number != 0;
  fail(fmt::format("{} must be True or False", what));
}

std::vector<int64_t> Translator::intsOf(const Item& item, const char* what) {
  if (item.kind == Item::Kind::Number) return {intOf(item, what)};
  if (item.kind != Item::Kind::List) fail(fmt::format("{} must be a list of integers", what));
  std::vector<int64_t> values;
  for (const Item& element : item.elements) values.push_back(intOf(element, what));
  return values;
}

const Item& Translator::tensorOf(const Item& item, const char* what) {
  if (item.kind != Item::Kind::Tensor) fail(fmt::format("{} must be a tensor", what));
  return item;
}

int Translator::axis(int64_t dim, int rank) {
  int64_t extent = std::max(rank, 1);
  if (dim < -extent || dim >= extent)
    fail(fmt::format("dimension {} is out of range for a tensor of rank {}", dim, rank));
  return static_cast<int>(dim < 0 ? dim + extent : dim);
}

std::optional<DType> Translator::dtypeArgument(const Item* item) {
  if (!item || item->kind == Item::Kind::None) return std::nullopt;
  auto type = static_cast<c10::ScalarType>(intOf(*item, "a dtype"));
  std::optional<DType> dtype = dtypeOfScalarType(type);
  if (!dtype) fail(fmt::format("the dtype {} has no Emmy type", c10::toString(type)));
  return dtype;
}

// ------------------------------------------------------------------------------------------------
// Code

// NumPy broadcasting; a size name meets a number or another name by unification (a size name is
// never 1 where it broadcasts).
Shape Translator::broadcast(const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape result(rank);
  for (size_t k = 0; k < rank; ++k) {
    std::optional<Dim> x, y;
    if (k >= rank - a.size()) x = sizes_.resolve(a[k - (rank - a.size())]);
    if (k >= rank - b.size()) y = sizes_.resolve(b[k - (rank - b.size())]);
    if (!x || (y && *x == Dim::constant(1))) {
      result[k] = *y;
    } else if (!y || *y == Dim::constant(1) || sizes_.unify(*x, *y)) {
      result[k] = sizes_.resolve(*x);
    } else {
      fail(fmt::format("cannot broadcast shapes {} and {}", shapeToString(sizes_.resolve(a)), shapeToString(sizes_.resolve(b))));
    }
  }
  return result;
}

CodePtr Translator::cast(DType dtype, const Item& tensor) { return callCode(std::string(dtypeName(dtype)), {tensor.code}); }

Item Translator::castTo(DType dtype, const Item& tensor) const {
  if (tensor.dtype == dtype) return tensor;
  return Item::tensor(dtype, tensor.shape, cast(dtype, tensor));
}

// A scalar where a tensor of `resultType` is computed: literals adapt to the other operand as in
// PyTorch; a size is an i64 value, converted where the result is not i64.
CodePtr Translator::operandCode(const Item& item, DType resultType) const {
  // A tensor with dimensions promotes in .emmy as in PyTorch; a rank-0 one may not (PyTorch's f16 tensor
  // times an f32 rank-0 one is f16), so it is cast.
  if (item.kind == Item::Kind::Tensor)
    return item.rank() == 0 && item.dtype != resultType ? cast(resultType, item) : item.code;
  if (item.kind == Item::Kind::Number) {
    if (std::isnan(item.number)) fail("a NaN constant has no .emmy spelling");
    if (item.boolean) return nameCode(item.number != 0 ? "true" : "false");
    return numberCode(item.number, item.integer);
  }
  if (item.kind == Item::Kind::Size) {
    CodePtr size = sizeCode(item.size);
    return resultType == DType::I64 ? size : callCode(std::string(dtypeName(resultType)), {size});
  }
  fail("expected a tensor or a number");
}

// PyTorch's result type: tensors promote; a Python scalar keeps a tensor's type unless it is a float
// beside an integer tensor (then the default dtype, f32).
// PyTorch's promotion: tensors with dimensions decide, then rank-0 tensors, then numbers; a lower group
// decides only where its category (bool < integer < float) is higher, a number then giving the default
// dtype of its category.
DType Translator::arithmeticType(const Item& a, const Item& b) {
  auto priority = [](const Item& item) {
    if (item.kind != Item::Kind::Tensor || item.wrapped) return 0;
    return item.rank() > 0 ? 2 : 1;
  };
  auto category = [](const Item& item) {
    if (item.kind != Item::Kind::Tensor) return item.boolean ? 0 : item.isFloatScalar() ? 2 : 1;
    return item.dtype == DType::Bool ? 0 : isFloat(item.dtype) ? 2 : 1;
  };
  if (priority(a) == priority(b) && a.kind == Item::Kind::Tensor && b.kind == Item::Kind::Tensor) return promote(a.dtype, b.dtype);
  const Item& high = priority(a) >= priority(b) ? a : b;
  const Item& low = priority(a) >= priority(b) ? b : a;
  if (category(low) <= category(high)) return high.dtype;
  if (priority(low) == 1) return low.dtype;
  return category(low) == 2 ? DType::F32 : DType::I64;
}

Item Translator::elementwise(const std::string& op, const Item& a, const Item& b) {
  if (a.kind != Item::Kind::Tensor && b.kind != Item::Kind::Tensor) return scalarArithmetic(op, a, b);
  bool comparison = op == "<" || op == "<=" || op == ">" || op == ">=" || op == "==" || op == "!=";
  bool logical = op == "and" || op == "or";
  DType operands = arithmeticType(a, b);
  Shape shape = broadcast(a.kind == Item::Kind::Tensor ? a.shape : Shape{}, b.kind == Item::Kind::Tensor ? b.shape : Shape{});
  CodePtr lhs = operandCode(a, operands), rhs = operandCode(b, operands);
  if (op == "/" && !isFloat(operands)) {
    // PyTorch's `/` is true division: integers divide as the default dtype.
    operands = DType::F32;
    if (a.kind == Item::Kind::Tensor) lhs = cast(operands, a);
    else if (b.kind == Item::Kind::Tensor) rhs = cast(operands, b);
  }
  if (logical && (a.dtype != DType::Bool || b.dtype != DType::Bool || a.kind != b.kind))
    fail(fmt::format("'{}' needs two bool tensors", op));
  DType result = comparison || logical ? DType::Bool : operands;
  Item combined = Item::tensor(result, shape, binaryCode(op, lhs, rhs));
  auto number = [](const Item& item) { return item.kind != Item::Kind::Tensor || item.wrapped; };
  combined.wrapped = number(a) && number(b);  // arithmetic of forward's numbers is a number
  return combined;
}

// Arithmetic on numbers and sizes known at import time: shapes and scales.
Item Translator::scalarArithmetic(const std::string& op, const Item& a, const Item& b) {
  if (a.kind == Item::Kind::Number && b.kind == Item::Kind::Number) {
    double x = a.number, y = b.number, value = 0;
    bool integer = a.integer && b.integer && !a.boolean && !b.boolean;
    if (op == "+") value = x + y;
    else if (op == "-") value = x - y;
    else if (op == "*") value = x * y;
    else if (op == "/") value = x / y, integer = false;
    else if (op == "//") value = std::floor(x / y);
    else if (op == "**") value = std::pow(x, y), integer = integer && y >= 0;
    else if (op == "<") return Item::ofNumber(x < y, true, true);
    else if (op == "<=") return Item::ofNumber(x <= y, true, true);
    else if (op == ">") return Item::ofNumber(x > y, true, true);
    else if (op == ">=") return Item::ofNumber(x >= y, true, true);
    else if (op == "==") return Item::ofNumber(x == y, true, true);
    else if (op == "!=") return Item::ofNumber(x != y, true, true);
    else fail(fmt::format("the operation '{}' on numbers is not supported", op));
    return Item::ofNumber(value, integer);
  }
  auto dimOf = [](const Item& item) -> std::optional<Dim> {
    if (item.kind == Item::Kind::Size) return item.size;
    if (item.kind == Item::Kind::Number && item.integer && !item.boolean && item.number >= 1) return Dim::constant(static_cast<int64_t>(item.number));
    return std::nullopt;
  };
  std::optional<Dim> x = dimOf(a), y = dimOf(b);
  if (x && y && op == "*") return Item::ofSize(sizes_.resolve(*x * *y));
  if (x && y && op == "//")
    if (std::optional<Dim> quotient = sizes_.resolve(*x).dividedBy(sizes_.resolve(*y))) return Item::ofSize(*quotient);
  fail(fmt::format("'{}' of sizes only known at run time is not supported (only products and exact quotients of sizes are)", op));
}

// A builtin applied elementwise. Float-only functions take integer tensors as the default dtype, as
// PyTorch does.
namespace {
// A tensor's shape, or a number's (none: it broadcasts).
Shape shapeOf(const Item& item) { return item.kind == Item::Kind::Tensor ? item.shape : Shape{}; }
}  // namespace

Item Translator::select(const Item& condition, const Item& a, const Item& b) {
  const Item& tensor = tensorOf(condition, "where's condition");
  if (tensor.dtype != DType::Bool) fail("where needs a bool condition");
  if (a.kind != Item::Kind::Tensor && b.kind != Item::Kind::Tensor) fail("where with two scalar branches is not supported");
  DType type = arithmeticType(a, b);
  return Item::tensor(type, broadcast(tensor.shape, broadcast(shapeOf(a), shapeOf(b))),
                      callCode("where", {tensor.code, operandCode(a, type), operandCode(b, type)}));
}

Item Translator::pairwise(const std::string& callee, const Item& a, const Item& b) {
  if (a.kind != Item::Kind::Tensor && b.kind != Item::Kind::Tensor) fail(fmt::format("{} of two numbers is not supported", callee));
  DType type = arithmeticType(a, b);
  return Item::tensor(type, broadcast(shapeOf(a), shapeOf(b)), callCode(callee, {operandCode(a, type), operandCode(b, type)}));
}

Item Translator::norm(const Item& operand, double p, const Item* dims, bool keepdim) {
  Item x = materialized(isFloat(operand.dtype) ? operand : castTo(DType::F32, operand), "norm_operand");
  Item magnitude = function("abs", x, false);
  if (p == INFINITY || p == -INFINITY) return reduce(p > 0 ? "max" : "min", magnitude, dims, keepdim, std::nullopt);
  if (p == 1) return reduce("sum", magnitude, dims, keepdim, std::nullopt);
  if (p == 2) return function("sqrt", reduce("sum", elementwise("*", x, x), dims, keepdim, std::nullopt), true);
  if (p <= 0) fail(fmt::format("the norm of order {} is not supported", p));
  Item powers = Item::tensor(x.dtype, x.shape, callCode("pow", {magnitude.code, numberCode(p, false)}));
  Item total = reduce("sum", powers, dims, keepdim, std::nullopt);
  return Item::tensor(total.dtype, total.shape, callCode("pow", {total.code, numberCode(1 / p, false)}));
}

Item Translator::pairwiseDistance(const Node* node, const Item& a, const Item& b) {
  Item last = Item::of(Item::Kind::List);
  last.elements.push_back(Item::ofNumber(-1, true));
  const Item* keep = optionalInput(node, "keepdim");
  Item difference = elementwise("+", elementwise("-", tensorOf(a, "the operand"), tensorOf(b, "the operand")),
                                Item::ofNumber(numberOf(input(node, "eps"), "eps"), false));
  return norm(difference, numberOf(input(node, "p"), "the norm's order"), &last, keep && boolOf(*keep, "keepdim"));
}

Item Translator::function(const std::string& callee, const Item& x, bool floatOnly, std::vector<CodePtr> arguments) {
  const Item& tensor = tensorOf(x, "the operand");
  Item operand = floatOnly && !isFloat(tensor.dtype) ? castTo(DType::F32, tensor) : tensor;
  arguments.insert(arguments.begin(), operand.code);
  return Item::tensor(operand.dtype, operand.shape, callCode(callee, std::move(arguments)));
}

Item Translator::nnFunction(const std::string& name, const Item& x, std::vector<CodePtr> arguments) {
  if (std::find(program_.imports.begin(), program_.imports.end(), "nn") == program_.imports.end()) program_.imports.push_back("nn");
  return function("nn." + name, x, true, std::move(arguments));
}

// `@` with PyTorch's rules for vectors: a vector operand is a matrix of one row (left) or one column
// (right) whose extra axis is dropped from the result.
Item Translator::matmul(const Item& a, const Item& b) {
  const Item& left = tensorOf(a, "a matrix product's operand");
  const Item& right = tensorOf(b, "a matrix product's operand");
  if (left.rank() == 0 || right.rank() == 0) fail("a matrix product needs operands of rank 1 or more");
  if (left.rank() == 1 && right.rank() == 1) {
    if (!sizes_.unify(left.shape[0], right.shape[0])) fail("the vectors of a dot product differ in length");
    return Item::tensor(promote(left.dtype, right.dtype), {}, callCode("sum", {binaryCode("*", left.code, right.code)}, {{"axis", numberCode(0, true)}}));
  }
  CodePtr lhs = left.code, rhs = right.code;
  Shape leftShape = left.shape, rightShape = right.shape;
  if (left.rank() == 1) lhs = callCode("unsqueeze", {lhs, numberCode(0, true)}), leftShape.insert(leftShape.begin(), Dim::constant(1));
  if (right.rank() == 1) rhs = callCode("unsqueeze", {rhs, numberCode(-1, true)}), rightShape.push_back(Dim::constant(1));
  const Dim& inner = leftShape.back();
  if (!sizes_.unify(inner, rightShape[rightShape.size() - 2]))
    fail(fmt::format("the inner dimensions of a matrix product differ: {} @ {}", shapeToString(sizes_.resolve(left.shape)),
                     shapeToString(sizes_.resolve(right.shape))));
  Shape shape = broadcast(Shape(leftShape.begin(), leftShape.end() - 2), Shape(rightShape.begin(), rightShape.end() - 2));
  shape.push_back(leftShape[leftShape.size() - 2]);
  shape.push_back(rightShape.back());
  CodePtr code = binaryCode("@", lhs, rhs);
  if (right.rank() == 1) code = callCode("squeeze", {code, numberCode(-1, true)}), shape.pop_back();
  if (left.rank() == 1) code = callCode("squeeze", {code, numberCode(-2, true)}), shape.erase(shape.end() - (right.rank() == 1 ? 1 : 2));
  return Item::tensor(promote(left.dtype, right.dtype), sizes_.resolve(shape), code);
}

// sum, mean, max or min over `dims` (None or empty: every axis).
Item Translator::reduce(const std::string& callee, const Item& x, const Item* dims, bool keepdim, std::optional<DType> dtype) {
  Item operand = tensorOf(x, "the reduced operand");
  if (dtype) operand = castTo(*dtype, operand);
  if (callee == "sum" && !isFloat(operand.dtype)) operand = castTo(DType::I64, operand);  // PyTorch sums integers in i64
  if (callee == "mean" && !isFloat(operand.dtype)) fail("mean of an integer tensor needs a floating-point dtype");
  std::vector<int64_t> given = dims && dims->kind != Item::Kind::None ? intsOf(*dims, "a reduction's dims") : std::vector<int64_t>{};
  std::vector<int> axes;
  for (int64_t dim : given) axes.push_back(axis(dim, operand.rank()));
  if (given.empty())
    for (int d = 0; d < operand.rank(); ++d) axes.push_back(d), given.push_back(d);
  if (operand.rank() == 0) return operand;
  Shape shape;
  for (int d = 0; d < operand.rank(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) shape.push_back(operand.shape[d]);
    else if (keepdim) shape.push_back(Dim::constant(1));
  }
  std::vector<CodePtr> listed;
  for (int64_t dim : given) listed.push_back(numberCode(static_cast<double>(dim), true));
  std::vector<std::pair<std::string, CodePtr>> keywords = {{"axis", listed.size() == 1 ? listed[0] : listCode(listed)}};
  if (keepdim) keywords.push_back({"keepdim", nameCode("true")});
  return Item::tensor(operand.dtype, shape, callCode(callee, {operand.code}, keywords));
}

// view and reshape: each entry a number, a size or -1.
Item Translator::reshape(const Item& x, const std::vector<Item>& entries) {
  const Item& tensor = tensorOf(x, "the reshaped operand");
  Dim total = Dim::constant(1), known = Dim::constant(1);
  for (const Dim& dim : tensor.shape) total = total * dim;
  total = sizes_.resolve(total);
  std::vector<std::optional<Dim>> dims;
  for (const Item& entry : entries) {
    if (entry.kind == Item::Kind::Size) dims.push_back(sizes_.resolve(entry.size));
    else if (intOf(entry, "a shape entry") == -1) dims.push_back(std::nullopt);
    else if (entry.number >= 1) dims.push_back(Dim::constant(static_cast<int64_t>(entry.number)));
    else fail(fmt::format("a shape entry of {} is not supported", entry.number));
    if (dims.back()) known = known * *dims.back();
  }
  Shape shape;
  std::vector<CodePtr> listed;
  for (const std::optional<Dim>& dim : dims) {
    if (dim) {
      shape.push_back(*dim);
    } else {
      std::optional<Dim> inferred = total.dividedBy(known);
      if (!inferred) fail(fmt::format("cannot infer -1 in a reshape of {} elements into {}", total.toString(), known.toString()));
      shape.push_back(*inferred);
    }
    listed.push_back(dim ? sizeCode(*dim) : numberCode(-1, true));
  }
  Dim newTotal = Dim::constant(1);
  for (const Dim& dim : shape) newTotal = newTotal * dim;
  if (!(sizes_.resolve(newTotal) == total))
    fail(fmt::format("cannot reshape {} into {}", shapeToString(sizes_.resolve(tensor.shape)), shapeToString(shape)));
  if (sizes_.resolve(shape) == sizes_.resolve(tensor.shape)) return tensor;
  return Item::tensor(tensor.dtype, shape, callCode("reshape", {tensor.code, listCode(listed)}));
}

// ------------------------------------------------------------------------------------------------
// Inputs and attributes

void Translator::declareInputs() {
  const auto& graphInputs = model_.graph->inputs();
  std::map<std::string, const InputSpec*> specs;
  for (const InputSpec& spec : options_.inputs) {
    if (std::find(model_.argumentNames.begin(), model_.argumentNames.end(), spec.name) == model_.argumentNames.end())
      throw UsageError(withSuggestion(fmt::format("--input {}: forward has no argument {} (its arguments: {})", spec.name,
                                                  spec.name, join(model_.argumentNames, ", ")),
                                      spec.name, model_.argumentNames));
    specs[spec.name] = &spec;
  }
  // The size names given with --input are the user's, as forward's arguments and the outputs are: they are
  // claimed before the parameters', which take `_1`, `_2` on a clash (spec section 6).
  std::set<std::string> givenSizes;
  for (const InputSpec& spec : options_.inputs)
    for (const std::string& dim : spec.dims) {
      if (dim.empty() || std::isdigit(static_cast<unsigned char>(dim[0])) || !givenSizes.insert(dim).second) continue;
      if (taken_.count(dim)) {
        bool argument = std::count(model_.argumentNames.begin(), model_.argumentNames.end(), dim) > 0;
        throw UsageError(fmt::format("--input {}: the size name {} is also the name of {}; give the size another name",
                                     spec.name, dim, argument ? "an argument of forward" : "an output"));
      }
      sizeName(dim);
    }
  // Parameters and buffers are named by attribute path, in the order PyTorch lists them.
  for (const auto& parameter : model_.module.named_parameters(true)) nameAttribute(parameter.name);
  for (const auto& buffer : model_.module.named_buffers(true)) nameAttribute(buffer.name);

  items_[graphInputs[0]] = Item::of(Item::Kind::Module, "");
  for (size_t k = 0; k < model_.argumentNames.size(); ++k) {
    const std::string& name = model_.argumentNames[k];
    const Value* value = graphInputs[k + 1];
    auto type = value->type()->cast<c10::TensorType>();
    if (!type) {
      // A number becomes a scalar parameter.
      std::optional<DType> dtype;
      if (value->type()->cast<c10::FloatType>()) dtype = DType::F32;
      else if (value->type()->cast<c10::IntType>()) dtype = DType::I64;
      else if (value->type()->cast<c10::BoolType>()) dtype = DType::Bool;
      if (!dtype) {
        report(nullptr, fmt::format("forward's argument {} is a {}; only tensors and numbers can be imported", name,
                                    value->type()->str()));
        poisoned_.insert(value);
        continue;
      }
      Item scalar = Item::tensor(*dtype, {}, nameCode(name));
      scalar.wrapped = true;
      items_[value] = scalar;
      program_.inputs.push_back({name, *dtype, {}, /*scalar=*/true});
      continue;
    }
    Declaration declaration{name, DType::F32, {}};
    std::vector<std::string> dims;
    bool known = false;
    if (auto spec = specs.find(name); spec != specs.end()) {
      declaration.dtype = spec->second->dtype;
      dims = spec->second->dims;
      known = true;
    } else if (fs::path file = fs::path(options_.shapesFrom) / (name + ".npy"); !options_.shapesFrom.empty() && fs::exists(file)) {
      NpyInfo info = readNpyInfo(file);
      declaration.dtype = info.dtype;
      dims.assign(info.shape.size(), "");
      known = true;
    } else if (auto rank = type->dim()) {
      // A traced graph records its example inputs' types.
      if (auto scalarType = type->scalarType())
        if (auto dtype = dtypeOfScalarType(*scalarType)) declaration.dtype = *dtype;
      dims.assign(*rank, "");
      known = true;
    }
    if (!known) {
      report(nullptr, fmt::format("the rank of forward's argument {} is not recorded in the model: give it with --input {}=f32[N, 64] "
                                  "(dims are numbers or size names; empty ones are named by the importer)", name, name));
      poisoned_.insert(value);
      continue;
    }
    for (size_t d = 0; d < dims.size(); ++d) {
      const std::string& dim = dims[d];
      if (!dim.empty() && std::isdigit(static_cast<unsigned char>(dim[0]))) {
        declaration.shape.push_back(Dim::constant(std::stoll(dim)));
      } else if (!dim.empty()) {
        if (!taken_.count(dim)) sizeName(dim);
        declaration.shape.push_back(Dim::size(dim));
      } else {
        std::string upper = name;
        for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        declaration.shape.push_back(Dim::size(sizeName(fmt::format("{}{}", upper, d))));
      }
    }
    items_[value] = Item::tensor(declaration.dtype, declaration.shape, nameCode(name));
    program_.inputs.push_back(declaration);
  }
}

// prim::GetAttr: a submodule, a parameter or buffer (an input), or a number the module holds.
Item Translator::attribute(const Node* node) {
  const Item& owner = item(node->input(0));
  if (owner.kind != Item::Kind::Module) fail("an attribute of something other than the module is not supported");
  std::string name = node->s(c10::attr::name);
  std::string path = owner.text.empty() ? name : owner.text + "." + name;
  torch::jit::Module module = model_.module;
  if (!owner.text.empty()) {
    for (size_t start = 0, dot; start <= owner.text.size(); start = dot + 1) {
      dot = owner.text.find('.', start);
      if (dot == std::string::npos) dot = owner.text.size();
      module = module.attr(owner.text.substr(start, dot - start)).toModule();
    }
  }
  c10::IValue value = module.attr(name);
  if (value.isModule()) return Item::of(Item::Kind::Module, path);
  if (value.isDouble()) return Item::ofNumber(value.toDouble(), false);
  if (value.isInt()) return Item::ofNumber(static_cast<double>(value.toInt()), true);
  if (value.isBool()) return Item::ofNumber(value.toBool(), true, true);
  if (value.isNone()) return Item::of(Item::Kind::None);
  if (!value.isTensor()) fail(fmt::format("the attribute {} holds a {}, which is not supported", path, value.tagKind()));
  const at::Tensor& tensor = value.toTensor();
  std::optional<DType> dtype = dtypeOfScalarType(tensor.scalar_type());
  if (!dtype) fail(fmt::format("the attribute {} has dtype {}, which Emmy has no type for", path, c10::toString(tensor.scalar_type())));
  nameAttribute(path);
  Declaration declaration{parameterNames_[path], *dtype, {}};
  for (int64_t extent : tensor.sizes()) declaration.shape.push_back(Dim::constant(extent));
  usedParameters_[declaration.name] = declaration;
  return Item::tensor(declaration.dtype, declaration.shape, nameCode(declaration.name));
}

// ------------------------------------------------------------------------------------------------
// Nodes

// Numbers, lists, tuples and sizes: what shapes and scales are made of.
bool Translator::translateScalar(const std::string& kind, const Node* node) {
  const Value* out = node->outputs().empty() ? nullptr : node->output(0);
  if (kind == "prim::Constant") {
    std::optional<c10::IValue> value = torch::jit::toIValue(out);
    EMMY_INTERNAL_ASSERT(value.has_value(), "a constant without a value");
    Item result = Item::of(Item::Kind::Other, value->tagKind());
    if (value->isNone()) result = Item::of(Item::Kind::None);
    else if (value->isBool()) result = Item::ofNumber(value->toBool(), true, true);
    else if (value->isInt()) result = Item::ofNumber(static_cast<double>(value->toInt()), true);
    else if (value->isDouble()) result = Item::ofNumber(value->toDouble(), false);
    else if (value->isString()) result = Item::of(Item::Kind::Text, value->toStringRef());
    else if (value->isIntList()) {
      result = Item::of(Item::Kind::List);
      for (int64_t element : value->toIntVector()) result.elements.push_back(Item::ofNumber(static_cast<double>(element), true));
    } else if (value->isDoubleList()) {
      result = Item::of(Item::Kind::List);
      for (double element : value->toDoubleVector()) result.elements.push_back(Item::ofNumber(element, false));
    } else if (value->isTensor()) {
      const at::Tensor& tensor = value->toTensor();
      if (tensor.dim() != 0)
        fail(fmt::format("a constant tensor of shape {} is not supported (only parameters and buffers become inputs)",
                         c10::str(tensor.sizes())));
      bool floating = tensor.is_floating_point();
      result = tensor.scalar_type() == c10::ScalarType::Bool ? Item::ofNumber(tensor.item<bool>(), true, true)
                                                             : Item::ofNumber(tensor.item<double>(), !floating);
    }
    items_[out] = result;
    return true;
  }
  if (kind == "prim::ListConstruct" || kind == "prim::TupleConstruct") {
    Item list = Item::of(Item::Kind::List);
    for (const Value* element : node->inputs()) list.elements.push_back(item(element));
    items_[out] = list;
    return true;
  }
  if (kind == "prim::ListUnpack" || kind == "prim::TupleUnpack") {
    const Item& list = item(node->input(0));
    if (list.kind != Item::Kind::List || list.elements.size() != node->outputs().size()) fail("unpacking something other than a list of the right length");
    for (size_t k = 0; k < node->outputs().size(); ++k) define(node->output(k), list.elements[k]);
    return true;
  }
  if (kind == "aten::__getitem__" || kind == "prim::TupleIndex") {
    const Item& list = item(node->input(0));
    if (list.kind != Item::Kind::List) fail("indexing something other than a list");
    int64_t index = intOf(item(node->input(1)), "a list index");
    int64_t length = static_cast<int64_t>(list.elements.size());
    if (index < -length || index >= length) fail(fmt::format("index {} is out of range for a list of {}", index, length));
    define(out, list.elements[index < 0 ? index + length : index]);
    return true;
  }
  if (kind == "prim::NumToTensor" || kind == "aten::Int" || kind == "aten::Float" || kind == "aten::ScalarImplicit" ||
      kind == "aten::FloatImplicit" || kind == "aten::IntImplicit") {
    const Item& value = item(node->input(0));
    if (!value.isScalar()) fail(fmt::format("{} of a tensor is not supported", kind));
    Item result = value;
    if (kind == "aten::Float" || kind == "aten::FloatImplicit") {
      if (value.kind == Item::Kind::Size) fail("a size only known at run time used as a float is not supported");
      result.integer = result.boolean = false;
    }
    items_[out] = result;
    return true;
  }
  if (kind == "aten::size") {
    const Item& x = tensorOf(item(node->input(0)), "the operand of size");
    if (node->inputs().size() == 1) {
      Item list = Item::of(Item::Kind::List);
      for (const Dim& dim : x.shape) list.elements.push_back(Item::ofSize(sizes_.resolve(dim)));
      items_[out] = list;
    } else {
      items_[out] = Item::ofSize(sizes_.resolve(x.shape[axis(intOf(item(node->input(1)), "a dimension"), x.rank())]));
    }
    return true;
  }
  if (kind == "aten::dim") {
    items_[out] = Item::ofNumber(tensorOf(item(node->input(0)), "the operand of dim").rank(), true);
    return true;
  }
  if (kind == "aten::len") {
    const Item& list = item(node->input(0));
    if (list.kind != Item::Kind::List) fail("len of something other than a list");
    items_[out] = Item::ofNumber(static_cast<double>(list.elements.size()), true);
    return true;
  }
  if (kind == "prim::dtype") {
    items_[out] = Item::ofNumber(static_cast<double>(scalarTypeOf(tensorOf(item(node->input(0)), "the operand").dtype)), true);
    return true;
  }
  if (kind == "prim::device") {
    items_[out] = Item::of(Item::Kind::Other, "Device");
    return true;
  }
  // Arithmetic on numbers in math.sqrt(d) style.
  if ((kind == "aten::sqrt" || kind == "aten::neg") && node->inputs().size() == 1 && item(node->input(0)).kind == Item::Kind::Number) {
    const Item& value = item(node->input(0));
    items_[out] = kind == "aten::neg" ? Item::ofNumber(-value.number, value.integer) : Item::ofNumber(std::sqrt(value.number), false);
    return true;
  }
  return false;
}

// Views of a tensor: nothing computed.
bool Translator::translateView(const std::string& kind, const Node* node) {
  static const std::set<std::string> identities = {"aten::contiguous", "aten::clone", "aten::detach", "aten::dropout",
                                                   "aten::alias", "aten::feature_dropout"};
  const Value* out = node->output(0);
  if (identities.count(kind)) {
    define(out, tensorOf(item(node->input(0)), "the operand"));
    return true;
  }
  static const std::set<std::string> views = {"aten::transpose", "aten::t", "aten::permute", "aten::view",
                                              "aten::reshape", "aten::flatten", "aten::unsqueeze", "aten::squeeze",
                                              "aten::expand", "aten::expand_as", "aten::to", "aten::type_as"};
  if (!views.count(kind)) return false;
  Item x = tensorOf(item(node->input(0)), "the operand");
  int rank = x.rank();
  auto number = [](int64_t value) { return numberCode(static_cast<double>(value), true); };
  if (kind == "aten::transpose" || kind == "aten::t") {
    if (kind == "aten::t" && rank < 2) return define(out, x), true;
    int64_t a = kind == "aten::t" ? 0 : intOf(input(node, "dim0"), "a dimension");
    int64_t b = kind == "aten::t" ? 1 : intOf(input(node, "dim1"), "a dimension");
    int first = axis(a, rank), second = axis(b, rank);
    if (first == second) return define(out, x), true;
    Shape shape = x.shape;
    std::swap(shape[first], shape[second]);
    define(out, Item::tensor(x.dtype, shape, callCode("transpose", {x.code, number(a), number(b)})));
  } else if (kind == "aten::permute") {
    std::vector<int64_t> dims = intsOf(input(node, "dims"), "permute's dims");
    if (static_cast<int>(dims.size()) != rank) fail("permute needs every dimension of the tensor");
    Shape shape;
    std::vector<CodePtr> listed;
    for (int64_t dim : dims) shape.push_back(x.shape[axis(dim, rank)]), listed.push_back(number(dim));
    define(out, Item::tensor(x.dtype, shape, callCode("permute", {x.code, listCode(listed)})));
  } else if (kind == "aten::view" || kind == "aten::reshape") {
    const Item& size = input(node, kind == "aten::view" ? "size" : "shape");
    if (size.kind != Item::Kind::List) fail("the shape must be a list");
    define(out, reshape(x, size.elements));
  } else if (kind == "aten::flatten") {
    if (rank == 0) return define(out, reshape(x, {Item::ofNumber(1, true)})), true;
    int start = axis(intOf(input(node, "start_dim"), "start_dim"), rank), end = axis(intOf(input(node, "end_dim"), "end_dim"), rank);
    std::vector<Item> entries;
    Dim flat = Dim::constant(1);
    for (int d = 0; d < rank; ++d) {
      if (d < start || d > end) entries.push_back(Item::ofSize(sizes_.resolve(x.shape[d])));
      else flat = flat * x.shape[d];
      if (d == end) entries.push_back(Item::ofSize(sizes_.resolve(flat)));
    }
    define(out, reshape(x, entries));
  } else if (kind == "aten::unsqueeze") {
    int64_t dim = intOf(input(node, "dim"), "a dimension");
    if (dim < -(rank + 1) || dim > rank) fail(fmt::format("dimension {} is out of range for unsqueeze of a tensor of rank {}", dim, rank));
    Shape shape = x.shape;
    shape.insert(shape.begin() + (dim < 0 ? dim + rank + 1 : dim), Dim::constant(1));
    define(out, Item::tensor(x.dtype, shape, callCode("unsqueeze", {x.code, number(dim)})));
  } else if (kind == "aten::squeeze") {
    // Only dimensions of size 1 go; squeezing another is a no-op, as in PyTorch.
    std::vector<int64_t> dims;
    if (const Item* dim = optionalInput(node, "dim")) dims = {intOf(*dim, "a dimension")};
    else for (int d = 0; d < rank; ++d) dims.push_back(d);
    Item result = x;
    for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
      int d = axis(*it, result.rank());
      if (!(sizes_.resolve(result.shape[d]) == Dim::constant(1))) continue;
      result.shape.erase(result.shape.begin() + d);
      result.code = callCode("squeeze", {result.code, number(d)});
    }
    define(out, result);
  } else if (kind == "aten::expand" || kind == "aten::expand_as") {
    Shape target;
    if (kind == "aten::expand_as") {
      target = tensorOf(input(node, "other"), "expand_as's other").shape;
    } else {
      const Item& size = input(node, "size");
      if (size.kind != Item::Kind::List) fail("the size must be a list");
      for (size_t k = 0; k < size.elements.size(); ++k) {
        const Item& entry = size.elements[k];
        size_t fromEnd = size.elements.size() - k;
        bool keep = entry.kind == Item::Kind::Number && entry.number == -1;
        if (keep && fromEnd > static_cast<size_t>(rank)) fail("-1 in expand for a new dimension");
        target.push_back(keep ? x.shape[rank - fromEnd] : entry.kind == Item::Kind::Size ? entry.size : Dim::constant(intOf(entry, "a size")));
      }
    }
    Shape shape = broadcast(x.shape, target);
    if (sizes_.resolve(shape) == sizes_.resolve(x.shape)) return define(out, x), true;
    std::vector<CodePtr> listed;
    for (const Dim& dim : shape) listed.push_back(sizeCode(dim));
    define(out, Item::tensor(x.dtype, shape, callCode("broadcast_to", {x.code, listCode(listed)})));
  } else {  // aten::to, aten::type_as
    std::optional<DType> dtype;
    if (kind == "aten::type_as") dtype = tensorOf(input(node, "other"), "type_as's other").dtype;
    else if (const Item* other = optionalInput(node, "other")) dtype = tensorOf(*other, "to's other").dtype;
    else dtype = dtypeArgument(optionalInput(node, "dtype"));
    define(out, dtype ? castTo(*dtype, x) : x);
  }
  return true;
}

// layer_norm over the last len(normalized_shape) axes, written out: the mean, the centred input, the
// (biased) variance, then the scale and shift. Half-precision input is normalised in f32, as PyTorch does.
// The losses of torch.nn.functional: the loss of each element, then their mean or sum by `reduction`
// (at::Reduction: 0 none, 1 mean, 2 sum).
Item Translator::loss(const std::string& kind, const Node* node) {
  const Item& scores = tensorOf(item(node->input(0)), "a loss's input");
  const Item& target = tensorOf(item(node->input(1)), "a loss's target");
  std::string base = baseName(node->input(0));
  auto number = [](double value) { return Item::ofNumber(value, false); };
  if (!isFloat(arithmeticType(scores, target))) fail(fmt::format("{} of integer tensors", kind));
  Item x = materialized(scores, base), t = materialized(target, baseName(node->input(1)));
  auto negated = [](Item value) {
    value.code = unaryCode("-", value.code);
    return value;
  };
  Item each;
  if (kind == "aten::mse_loss") {
    Item difference = materialized(elementwise("-", x, t), base + "_diff");
    each = elementwise("*", difference, difference);
  } else if (kind == "aten::l1_loss") {
    each = function("abs", elementwise("-", x, t), false);
  } else if (kind == "aten::smooth_l1_loss" || kind == "aten::huber_loss") {
    bool huber = kind == "aten::huber_loss";
    double width = numberOf(input(node, huber ? "delta" : "beta"), huber ? "huber_loss's delta" : "smooth_l1_loss's beta");
    Item distance = materialized(function("abs", elementwise("-", x, t), false), base + "_dist");
    if (width == 0) {
      each = distance;
    } else {
      // smooth L1: 0.5 d^2 / beta below beta, d - beta / 2 above; Huber is delta times that.
      Item square = elementwise("*", elementwise("*", number(0.5), distance), distance);
      Item inside = huber ? square : elementwise("/", square, number(width));
      Item outside = elementwise("-", distance, number(0.5 * width));
      if (huber) outside = elementwise("*", number(width), outside);
      each = select(elementwise("<", distance, number(width)), inside, outside);
    }
  } else if (kind == "aten::kl_div") {
    if (boolOf(input(node, "log_target"), "kl_div's log_target")) {
      each = elementwise("*", function("exp", t, true), elementwise("-", t, x));
    } else {  // xlogy(t, t) - t * x: 0 where t is 0
      Item logTerm = select(elementwise("==", t, number(0)), number(0), elementwise("*", t, function("log", t, true)));
      each = elementwise("-", logTerm, elementwise("*", t, x));
    }
  } else if (kind == "aten::binary_cross_entropy") {
    // (t - 1) * max(log(1 - x), -100) - t * max(log(x), -100), as ATen clamps the logarithms.
    auto clampedLog = [&](const Item& value) { return pairwise("max", function("log", value, true), number(-100)); };
    each = elementwise("-", elementwise("*", elementwise("-", t, number(1)), clampedLog(elementwise("-", number(1), x))),
                       elementwise("*", t, clampedLog(x)));
  } else if (kind == "aten::binary_cross_entropy_with_logits") {
    if (const Item* pos = optionalInput(node, "pos_weight"); pos && pos->kind != Item::Kind::None)
      fail("binary_cross_entropy_with_logits with pos_weight is not supported");
    // (1 - t) * x + m + log(exp(-m) + exp(-x - m)) with m = max(-x, 0), as ATen writes it.
    Item m = materialized(pairwise("max", negated(x), number(0)), base + "_m");
    Item logTerm = function("log", elementwise("+", function("exp", negated(m), true),
                                               function("exp", elementwise("-", negated(x), m), true)), true);
    each = elementwise("+", elementwise("+", elementwise("*", elementwise("-", number(1), t), x), m), logTerm);
  } else if (kind == "aten::hinge_embedding_loss") {
    double margin = numberOf(input(node, "margin"), "hinge_embedding_loss's margin");
    Item marginTerm = select(elementwise("!=", t, number(1)), pairwise("max", elementwise("-", number(margin), x), number(0)), number(0));
    each = elementwise("+", marginTerm, select(elementwise("!=", t, number(-1)), x, number(0)));
  } else if (kind == "aten::triplet_margin_loss") {
    // max(margin + d(anchor, positive) - d(anchor, negative), 0), d the p-norm distance; with swap, the
    // negative's distance is the lesser of the anchor's and the positive's.
    Item negative = materialized(tensorOf(item(node->input(2)), "the negative"), baseName(node->input(2)));
    Item far = pairwiseDistance(node, x, negative);
    if (boolOf(input(node, "swap"), "swap")) far = pairwise("min", far, pairwiseDistance(node, t, negative));
    Item gap = elementwise("-", elementwise("+", number(numberOf(input(node, "margin"), "the margin")), pairwiseDistance(node, x, t)), far);
    each = pairwise("max", gap, number(0));
  } else {  // aten::soft_margin_loss
    each = function("log", elementwise("+", number(1), function("exp", elementwise("*", negated(t), x), true)), true);
  }
  if (const Item* weight = optionalInput(node, "weight"); weight && weight->kind != Item::Kind::None)
    each = elementwise("*", each, *weight);
  int64_t reduction = intOf(input(node, "reduction"), "a loss's reduction");
  if (reduction == 0) return each;
  return reduce(reduction == 1 ? "mean" : "sum", each, nullptr, false, std::nullopt);
}

// cross_entropy and nll_loss of a batch of class scores [N, C] (or one row [C]) against class indices
// (i64 [N]) or class probabilities (the shape of the scores).
Item Translator::classLoss(const std::string& kind, const Node* node) {
  bool entropy = kind == "aten::cross_entropy_loss";
  Item scores = tensorOf(item(node->input(0)), "the class scores");
  const Item& target = tensorOf(item(node->input(1)), "the target");
  if (const Item* weight = optionalInput(node, "weight"); weight && weight->kind != Item::Kind::None)
    fail(fmt::format("{} with class weights is not supported", kind));
  if (const Item* smoothing = optionalInput(node, "label_smoothing"); smoothing && numberOf(*smoothing, "label_smoothing") != 0)
    fail("cross_entropy with label_smoothing is not supported");
  if (scores.rank() != 1 && scores.rank() != 2) fail(fmt::format("{} of scores of rank {} is not supported (only [N, C] and [C])", kind, scores.rank()));
  std::string base = baseName(node->input(0));
  if (!isFloat(scores.dtype)) fail(fmt::format("{} of integer scores", kind));
  Item logProbabilities = scores;
  if (entropy)
    logProbabilities.code = callCode("log_softmax", {scores.code}, {{"axis", numberCode(scores.rank() - 1, true)}});
  logProbabilities = materialized(logProbabilities, base + "_logp");
  int64_t reduction = intOf(input(node, "reduction"), "a loss's reduction");
  Item classAxis = Item::ofNumber(scores.rank() - 1, true);
  if (isFloat(target.dtype)) {  // probabilities: -sum over the classes of t * log p, a mean over the rows
    if (!entropy) fail("nll_loss needs class indices as its target");
    Item each = reduce("sum", elementwise("*", target, logProbabilities), &classAxis, false, std::nullopt);
    each.code = unaryCode("-", each.code);
    return reduction == 0 ? each : reduce(reduction == 1 ? "mean" : "sum", each, nullptr, false, std::nullopt);
  }
  // Class indices: the row's entry at its class, picked in index form; targets equal to ignore_index
  // count neither in the sum nor in the mean.
  int64_t ignore = intOf(input(node, "ignore_index"), "ignore_index");
  Item classes = materialized(target, baseName(node->input(1)));
  if (classes.rank() != scores.rank() - 1 || (scores.rank() == 2 && !sizes_.unify(scores.shape[0], classes.shape[0])))
    fail(fmt::format("{}'s target must hold one class per row of the scores", kind));
  std::vector<std::string> indices;
  if (scores.rank() == 2) indices.push_back(claim("n"));
  indices.push_back(claim("c"));
  std::vector<CodePtr> subscripts, rowSubscripts;
  for (const std::string& index : indices) subscripts.push_back(nameCode(index));
  if (scores.rank() == 2) rowSubscripts.push_back(nameCode(indices[0]));
  CodePtr classOfRow = subscriptCode(classes.code->text, rowSubscripts);
  CodePtr counted = binaryCode("!=", classOfRow, numberCode(static_cast<double>(ignore), true));
  CodePtr chosen = binaryCode("and", binaryCode("==", nameCode(indices.back()), classOfRow), counted);
  CodePtr picked = callCode("where", {chosen, unaryCode("-", subscriptCode(logProbabilities.code->text, subscripts)), numberCode(0, true)});
  std::string pickedName = emit(base + "_picked", picked, indices);
  for (const std::string& index : indices) taken_.erase(index);
  Item each = reduce("sum", Item::tensor(scores.dtype, scores.shape, nameCode(pickedName)), &classAxis, false, std::nullopt);
  if (reduction == 0) return each;
  Item total = reduce("sum", each, nullptr, false, std::nullopt);
  if (reduction == 2) return total;
  Item kept = Item::tensor(DType::F32, classes.shape, callCode("where", {binaryCode("!=", classes.code, numberCode(static_cast<double>(ignore), true)),
                                                                          numberCode(1, false), numberCode(0, false)}));
  return elementwise("/", total, reduce("sum", kept, nullptr, false, std::nullopt));
}

Item Translator::standardized(const Item& wide, const std::vector<int>& axes, double eps, const std::string& base) {
  std::vector<CodePtr> listed;
  for (int axis : axes) listed.push_back(numberCode(axis - wide.rank(), true));
  CodePtr axisCode = listed.size() == 1 ? listed[0] : listCode(listed);
  CodePtr mean = callCode("mean", {wide.code}, {{"axis", axisCode}, {"keepdim", nameCode("true")}});
  CodePtr centered = nameCode(emit(base + "_centered", binaryCode("-", wide.code, mean)));
  CodePtr variance = nameCode(emit(base + "_var", callCode("mean", {binaryCode("*", centered, centered)}, {{"axis", axisCode}, {"keepdim", nameCode("true")}})));
  return Item::tensor(wide.dtype, wide.shape, binaryCode("*", centered, callCode("rsqrt", {binaryCode("+", variance, numberCode(eps, false))})));
}

Item Translator::channelVector(const Item& vector, int rank) {
  const Item& tensor = tensorOf(vector, "a per-channel vector");
  if (tensor.rank() != 1) fail(fmt::format("a per-channel vector of rank {}", tensor.rank()));
  Item result = tensor;
  for (int d = 2; d < rank; ++d) {
    result.code = callCode("unsqueeze", {result.code, numberCode(-1, true)});
    result.shape.push_back(Dim::constant(1));
  }
  return result;
}

Item Translator::indexed(const Value* value, DType dtype, const Shape& shape,
                         const std::function<CodePtr(const std::vector<CodePtr>& indices)>& element) {
  auto output = outputNames_.find(value);
  return indexedAs(output != outputNames_.end() ? output->second.front() : claim(baseName(value)), dtype, shape, element);
}

Item Translator::indexedAs(const std::string& target, DType dtype, const Shape& shape,
                           const std::function<CodePtr(const std::vector<CodePtr>& indices)>& element) {
  std::vector<std::string> names;
  std::vector<CodePtr> indices;
  for (size_t d = 0; d < shape.size(); ++d) {
    names.push_back(claim(fmt::format("i{}", d)));
    indices.push_back(nameCode(names.back()));
  }
  // Each index's range is written on the left: nothing on the right need read it alone.
  program_.statements.push_back({target, names, element(indices), shape});
  for (const std::string& name : names) taken_.erase(name);
  return Item::tensor(dtype, shape, nameCode(target));
}

namespace {
// The element at `indices` of `source`[..., start::step, ...] sliced along `dim`.
std::function<CodePtr(const std::vector<CodePtr>&)> sliceElement(std::string source, int dim, int64_t start, int64_t step) {
  return [source = std::move(source), dim, start, step](const std::vector<CodePtr>& indices) {
    std::vector<CodePtr> subscripts = indices;
    CodePtr scaled = step == 1 ? indices[dim] : binaryCode("*", numberCode(static_cast<double>(step), true), indices[dim]);
    subscripts[dim] = start == 0 ? scaled : binaryCode("+", scaled, numberCode(static_cast<double>(start), true));
    return subscriptCode(source, subscripts);
  };
}
}  // namespace

// Views that move elements in ways whole-tensor form has no word for, written in index form: select,
// slice and narrow (with bounds known when the model is imported), flip, tril and triu, `.T`,
// constant_pad_nd and roll (of dims known when imported).
bool Translator::translateIndexedView(const std::string& kind, const Node* node) {
  static const std::set<std::string> kinds = {"aten::select", "aten::slice", "aten::narrow", "aten::flip",
                                              "aten::tril", "aten::triu", "aten::numpy_T", "aten::constant_pad_nd",
                                              "aten::roll"};
  if (!kinds.count(kind)) return false;
  const Value* out = node->output(0);
  Item x = materialized(tensorOf(item(node->input(0)), "the operand"), baseName(node->input(0)));
  int rank = x.rank();
  const std::string& source = x.code->text;
  auto sizeOf = [&](int d) { return sizes_.resolve(x.shape[d]); };
  if (kind == "aten::numpy_T") {
    std::vector<CodePtr> order;
    Shape shape;
    for (int d = rank; d-- > 0;) order.push_back(numberCode(d, true)), shape.push_back(x.shape[d]);
    define(out, rank < 2 ? x : Item::tensor(x.dtype, shape, callCode("permute", {x.code, listCode(order)})));
    return true;
  }
  if (kind == "aten::constant_pad_nd") {
    // pad lists (before, after) pairs from the last dim backwards; a negative one crops.
    std::vector<int64_t> pads = intsOf(input(node, "pad"), "pad");
    double value = numberOf(input(node, "value"), "the padding value");
    if (pads.size() % 2 != 0 || static_cast<int>(pads.size() / 2) > x.rank()) fail("pad needs (before, after) pairs, at most one per dim");
    std::vector<int64_t> before(x.rank(), 0);
    Shape shape = x.shape;
    for (size_t k = 0; k < pads.size() / 2; ++k) {
      int dim = x.rank() - 1 - static_cast<int>(k);
      if (pads[2 * k] == 0 && pads[2 * k + 1] == 0) continue;
      Dim extent = sizes_.resolve(x.shape[dim]);
      if (!extent.isConstant())
        fail(fmt::format("padding a dim only known at run time ({}): its new length is not a size the .emmy source can state", extent.toString()));
      int64_t length = extent.factor + pads[2 * k] + pads[2 * k + 1];
      if (length < 1) fail("padding that leaves no elements");
      before[dim] = pads[2 * k];
      shape[dim] = Dim::constant(length);
    }
    CodePtr fill = x.dtype == DType::Bool ? nameCode(value != 0 ? "true" : "false") : numberCode(value, !isFloat(x.dtype));
    define(out, indexed(out, x.dtype, shape, [&](const std::vector<CodePtr>& indices) {
      std::vector<CodePtr> subscripts = indices;
      for (int d = 0; d < x.rank(); ++d)
        if (before[d] != 0) subscripts[d] = binaryCode(before[d] > 0 ? "-" : "+", indices[d], numberCode(static_cast<double>(std::abs(before[d])), true));
      return paddedSubscriptCode(x.code->text, fill, subscripts);
    }));
    return true;
  }
  if (rank == 0) fail(fmt::format("{} of a rank-0 tensor", kind));
  if (kind == "aten::roll") {
    // Along each rolled dim (of a length known when imported), element i is the one `shift` before it:
    // where(i >= shift, x[i - shift], x[i + length - shift]); one stage per dim.
    std::vector<int64_t> shifts = intsOf(input(node, "shifts"), "roll's shifts"), dims = intsOf(input(node, "dims"), "roll's dims");
    if (dims.empty()) fail("roll of the flattened tensor (without dims) is not supported");
    if (dims.size() != shifts.size()) fail("roll needs one shift per dim");
    std::map<int, int64_t> shiftOf;
    for (size_t k = 0; k < dims.size(); ++k) {
      int dim = axis(dims[k], rank);
      Dim extent = sizeOf(dim);
      if (!extent.isConstant()) fail(fmt::format("roll along a dim only known at run time ({}): give it with --input", extent.toString()));
      int64_t length = std::max<int64_t>(extent.factor, 1);
      shiftOf[dim] = ((shiftOf[dim] + shifts[k]) % length + length) % length;
    }
    std::erase_if(shiftOf, [](const auto& entry) { return entry.second == 0; });
    if (shiftOf.empty()) return define(out, x), true;
    Item rolled = x;
    for (auto it = shiftOf.begin(); it != shiftOf.end(); ++it) {
      auto [dim, shift] = *it;
      int64_t length = sizeOf(dim).factor;
      std::string from = rolled.code->text;
      auto element = [&](const std::vector<CodePtr>& indices) {
        std::vector<CodePtr> before = indices, after = indices;
        before[dim] = binaryCode("-", indices[dim], numberCode(static_cast<double>(shift), true));
        after[dim] = binaryCode("+", indices[dim], numberCode(static_cast<double>(length - shift), true));
        return callCode("where", {binaryCode(">=", indices[dim], numberCode(static_cast<double>(shift), true)),
                                  subscriptCode(from, before), subscriptCode(from, after)});
      };
      rolled = std::next(it) == shiftOf.end() ? indexed(out, x.dtype, x.shape, element)
                                              : indexedAs(claim(baseName(out) + "_rolled"), x.dtype, x.shape, element);
    }
    define(out, rolled);
    return true;
  }
  if (kind == "aten::select") {
    int dim = axis(intOf(input(node, "dim"), "select's dim"), rank);
    int64_t index = intOf(input(node, "index"), "select's index");
    Dim extent = sizeOf(dim);
    if (extent.isConstant() && (index >= extent.factor || index < -extent.factor))
      fail(fmt::format("select: index {} is out of range for a dim of size {}", index, extent.factor));
    // Of a dim only known at run time, only the first and the last element are always there.
    if (!extent.isConstant() && index != 0 && index != -1)
      fail(fmt::format("select of element {} of a dim only known at run time ({}): give the dim with --input", index, extent.toString()));
    CodePtr at = index >= 0 ? numberCode(static_cast<double>(index), true)
                            : extent.isConstant() ? numberCode(static_cast<double>(extent.factor + index), true)
                                                  : binaryCode("-", sizeCode(extent), numberCode(1, true));
    Shape shape = x.shape;
    shape.erase(shape.begin() + dim);
    define(out, indexed(out, x.dtype, shape, [&](const std::vector<CodePtr>& indices) {
      std::vector<CodePtr> subscripts = indices;
      subscripts.insert(subscripts.begin() + dim, at);
      return subscriptCode(source, subscripts);
    }));
    return true;
  }
  if (kind == "aten::slice" || kind == "aten::narrow") {
    int dim = axis(intOf(input(node, "dim"), "the sliced dim"), rank);
    Dim extent = sizeOf(dim);
    int64_t start = 0, end = 0, step = 1;
    auto known = [&](const Item& value, const char* what) { return intOf(value, what); };
    if (kind == "aten::narrow") {
      start = known(input(node, "start"), "narrow's start");
      end = start + known(input(node, "length"), "narrow's length");
    } else {
      const Item* first = optionalInput(node, "start");
      const Item* last = optionalInput(node, "end");
      start = first && first->kind != Item::Kind::None ? known(*first, "a slice's start") : 0;
      end = last && last->kind != Item::Kind::None ? known(*last, "a slice's end") : INT64_MAX;
      step = known(input(node, "step"), "a slice's step");
    }
    if (start == 0 && end >= INT64_MAX / 2 && step == 1) return define(out, x), true;  // x[:]
    if (!extent.isConstant())
      fail(fmt::format("{} of a dim only known at run time ({}): its length is not a size the .emmy source can state",
                       kind.substr(6), extent.toString()));
    int64_t size = extent.factor;
    auto clampIndex = [&](int64_t value) { return std::clamp<int64_t>(value < 0 ? value + size : value, 0, size); };
    start = clampIndex(start), end = clampIndex(std::min<int64_t>(end, size));
    if (step < 1) fail("a slice's step must be positive");
    int64_t length = end > start ? (end - start + step - 1) / step : 0;
    if (length == 0) fail("a slice with no elements is not supported");
    Shape shape = x.shape;
    shape[dim] = Dim::constant(length);
    define(out, indexed(out, x.dtype, shape, sliceElement(source, dim, start, step)));
    return true;
  }
  if (kind == "aten::flip") {
    std::set<int> dims;
    for (int64_t dim : intsOf(input(node, "dims"), "flip's dims")) dims.insert(axis(dim, rank));
    define(out, indexed(out, x.dtype, x.shape, [&](const std::vector<CodePtr>& indices) {
      std::vector<CodePtr> subscripts = indices;
      for (int dim : dims)
        subscripts[dim] = binaryCode("-", binaryCode("-", sizeCode(sizeOf(dim)), numberCode(1, true)), indices[dim]);
      return subscriptCode(source, subscripts);
    }));
    return true;
  }
  // tril / triu: the elements on and below (above) the diagonal moved by `diagonal`, zeros elsewhere.
  if (rank < 2) fail(fmt::format("{} needs a tensor of rank 2 or more", kind));
  int64_t diagonal = intOf(input(node, "diagonal"), "the diagonal");
  define(out, indexed(out, x.dtype, x.shape, [&](const std::vector<CodePtr>& indices) {
    const CodePtr &row = indices[rank - 2], &column = indices[rank - 1];
    CodePtr edge = diagonal == 0 ? row : binaryCode(diagonal > 0 ? "+" : "-", row, numberCode(static_cast<double>(std::abs(diagonal)), true));
    CodePtr kept = kind == "aten::tril" ? binaryCode("<=", column, edge) : binaryCode(">=", column, edge);
    CodePtr zero = x.dtype == DType::Bool ? nameCode("false") : numberCode(0, true);
    return callCode("where", {kept, subscriptCode(source, indices), zero});
  }));
  return true;
}

bool Translator::translateJoin(const std::string& kind, const Node* node) {
  if (kind != "aten::cat" && kind != "aten::concat" && kind != "aten::stack") return false;
  const Value* out = node->output(0);
  std::string base = baseName(out);
  const Item& list = item(node->input(0));
  if (list.kind != Item::Kind::List || list.elements.empty()) fail(fmt::format("{} of something other than a list of tensors", kind.substr(6)));
  std::vector<Item> parts;
  DType dtype = tensorOf(list.elements[0], "a joined tensor").dtype;
  for (const Item& element : list.elements) dtype = promote(dtype, tensorOf(element, "a joined tensor").dtype);
  for (size_t k = 0; k < list.elements.size(); ++k)
    parts.push_back(materialized(castTo(dtype, tensorOf(list.elements[k], "a joined tensor")), fmt::format("{}_part", base)));
  int rank = parts[0].rank() + (kind == "aten::stack" ? 1 : 0);
  int dim = axis(intOf(input(node, "dim"), "the joined dim"), rank);
  Shape shape = parts[0].shape;
  for (const Item& part : parts) {
    if (part.rank() != parts[0].rank()) fail(fmt::format("{} of tensors of different ranks", kind.substr(6)));
    for (int d = 0; d < part.rank(); ++d)
      if ((kind == "aten::stack" || d != dim) && !sizes_.unify(part.shape[d], parts[0].shape[d]))
        fail(fmt::format("{} of tensors whose shapes differ outside the joined dim", kind.substr(6)));
  }
  // Along the joined dim, part k starts where the ones before it end.
  std::vector<Dim> starts;
  if (kind == "aten::stack") {
    shape.insert(shape.begin() + dim, Dim::constant(static_cast<int64_t>(parts.size())));
  } else {
    Dim total = Dim::constant(0);
    for (const Item& part : parts) {
      Dim extent = sizes_.resolve(part.shape[dim]);
      starts.push_back(total);
      if (total.factor == 0) total = extent;
      else if (total.isConstant() && extent.isConstant()) total = Dim::constant(total.factor + extent.factor);
      else if (total.sizes == extent.sizes) total = Dim{total.factor + extent.factor, total.sizes};
      else fail(fmt::format("cat along a dim of sizes {} and {}: their sum is not a size the .emmy source can state", total.toString(), extent.toString()));
    }
    shape[dim] = total;
  }
  define(out, indexed(out, dtype, sizes_.resolve(shape), [&](const std::vector<CodePtr>& indices) {
    CodePtr result;
    for (size_t k = parts.size(); k-- > 0;) {
      std::vector<CodePtr> subscripts = indices;
      CodePtr condition;
      if (kind == "aten::stack") {
        subscripts.erase(subscripts.begin() + dim);
        condition = binaryCode("==", indices[dim], numberCode(static_cast<double>(k), true));
      } else {
        if (!(starts[k] == Dim::constant(0))) subscripts[dim] = binaryCode("-", indices[dim], sizeCode(starts[k]));
        if (k + 1 < parts.size()) condition = binaryCode("<", indices[dim], sizeCode(starts[k + 1]));
      }
      CodePtr read = subscriptCode(parts[k].code->text, subscripts);
      result = !result ? read : callCode("where", {condition, read, result});
    }
    return result;
  }));
  return true;
}

// ------------------------------------------------------------------------------------------------
// Convolutions and pools, in index form: each output element is a reduction over its window (and, for a
// convolution, over the input channels of its group) whose indices carry their bounds, reading the input
// through pad() where a window may leave it. The spatial dims must be known when the model is imported:
// the output's are computed from them, and a .emmy dim is a number or a product of size names.

namespace {

// `value * factor + offset`, without the parts that do nothing.
CodePtr affineCode(CodePtr value, int64_t factor, int64_t offset) {
  CodePtr scaled = factor == 1 ? std::move(value) : binaryCode("*", std::move(value), numberCode(static_cast<double>(factor), true));
  if (offset == 0) return scaled;
  return binaryCode(offset > 0 ? "+" : "-", scaled, numberCode(static_cast<double>(std::abs(offset)), true));
}

// The names of a window's indices, as PyTorch's documentation writes them.
std::vector<std::string> windowIndexNames(int spatial) {
  if (spatial == 1) return {"k"};
  if (spatial == 2) return {"kh", "kw"};
  return {"kd", "kh", "kw"};
}

// f16 and bf16 windows accumulate, and are scaled, in f32.
DType windowAccumulator(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16 ? DType::F32 : dtype; }

// `value`, of type `from`, converted to `to` where they differ.
CodePtr convertedCode(CodePtr value, DType from, DType to) {
  return from == to ? value : callCode(std::string(dtypeName(to)), {std::move(value)});
}

}  // namespace

std::vector<int64_t> Translator::spatialInts(const Item& item, int dims, const char* what) {
  std::vector<int64_t> values = intsOf(item, what);
  if (values.size() == 1) values.assign(dims, values[0]);
  if (static_cast<int>(values.size()) != dims) fail(fmt::format("{} has {} entries for {} spatial dims", what, values.size(), dims));
  return values;
}

int64_t Translator::knownExtent(const Item& x, int d, const std::string& op) {
  Dim extent = sizes_.resolve(x.shape[d]);
  if (!extent.isConstant())
    fail(fmt::format("{} needs the spatial dims of its input known when the model is imported, not {}: give them with --input",
                     op, extent.toString()));
  return extent.factor;
}

Dim Translator::windowCount(const SizePolynomial& reach, int64_t stride) {
  SizePolynomial one = SizePolynomial::constant(1);
  return tensor::derivedDim(derivedSizes_, tensor::quotientPolynomial(derivedSizes_, reach, SizePolynomial::constant(stride)) + one, one);
}

bool Translator::translateWindowed(const std::string& kind, const Node* node) {
  static const std::set<std::string> convolutions = {
      "aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::conv_transpose1d", "aten::conv_transpose2d",
      "aten::conv_transpose3d", "aten::_convolution", "aten::convolution"};
  static const std::set<std::string> pools = {
      "aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d", "aten::avg_pool1d", "aten::avg_pool2d",
      "aten::avg_pool3d", "aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d",
      "aten::adaptive_max_pool1d", "aten::adaptive_max_pool2d", "aten::adaptive_max_pool3d"};
  if (convolutions.count(kind)) return define(node->output(0), convolution(kind, node), true), true;
  if (!pools.count(kind)) return false;
  define(node->output(0), pool(kind, node), true);
  // adaptive_max_pool's positions: an error where something reads them as a tensor.
  for (size_t k = 1; k < node->outputs().size(); ++k)
    define(node->output(k), Item::of(Item::Kind::Other, fmt::format("the positions of {}", kind)));
  return true;
}

// y[n, o, s...] = sum[c < C / groups, k... < K...](x[n, group's channel c, s * stride - padding + k * dilation]
// * w[o, c, k...]) + b[o]. A transposed convolution reads x[.., (s + padding - k * dilation) / stride] where
// that divides (0 elsewhere: a masked product, which the default policy runs as an implicit GEMM), with w
// laid out [C, O / groups, ...]. With groups, the statement runs over [N, groups, O / groups, ...] and is
// reshaped.
Item Translator::convolution(const std::string& kind, const Node* node) {
  std::string op = kind.substr(6);
  bool transposed = kind.find("transpose") != std::string::npos ||
                    ((kind == "aten::_convolution" || kind == "aten::convolution") && boolOf(input(node, "transposed"), "transposed"));
  Item x = materialized(tensorOf(input(node, "input"), "the convolved input"), baseName(node->input(0)));
  Item w = materialized(tensorOf(input(node, "weight"), "the weight"), baseName(node->input(1)));
  int spatial = w.rank() - 2;
  if (spatial < 1 || spatial > 3) fail(fmt::format("{} with a weight of rank {}", op, w.rank()));
  int lead = x.rank() - spatial;  // [N, C], or [C] unbatched
  if (lead != 1 && lead != 2) fail(fmt::format("{} of an input of rank {} with a weight of rank {}", op, x.rank(), w.rank()));
  if (x.dtype != w.dtype || !isFloat(x.dtype)) fail(fmt::format("{} needs an input and a weight of one floating-point type", op));
  int64_t groups = intOf(input(node, "groups"), "groups");
  if (groups < 1) fail("groups must be positive");
  std::vector<int64_t> stride = spatialInts(input(node, "stride"), spatial, "stride");
  std::vector<int64_t> dilation = spatialInts(input(node, "dilation"), spatial, "dilation");
  std::vector<int64_t> before(spatial, 0), after(spatial, 0), outputPadding(spatial, 0), kernel(spatial);
  std::vector<Dim> extent(spatial), output(spatial);  // numbers, or sizes known at run time
  for (int d = 0; d < spatial; ++d) kernel[d] = knownExtent(w, 2 + d, op), extent[d] = sizes_.resolve(x.shape[lead + d]);
  const Item& padding = input(node, "padding");
  if (padding.kind == Item::Kind::Text) {  // padding='same' or 'valid'
    if (padding.text != "same" && padding.text != "valid") fail(fmt::format("padding='{}' (PyTorch knows 'same' and 'valid')", padding.text));
    for (int d = 0; d < spatial && padding.text == "same"; ++d) {
      if (stride[d] != 1) fail("padding='same' needs stride 1");
      int64_t total = dilation[d] * (kernel[d] - 1);
      before[d] = total / 2, after[d] = total - before[d];  // the odd one after, as PyTorch
    }
  } else {
    before = after = spatialInts(padding, spatial, "padding");
  }
  if (transposed) outputPadding = spatialInts(input(node, "output_padding"), spatial, "output_padding");
  for (int d = 0; d < spatial; ++d) {
    if (stride[d] < 1 || dilation[d] < 1 || before[d] < 0 || outputPadding[d] < 0)
      fail(fmt::format("{}: strides and dilations must be positive, paddings not negative", op));
    if (transposed && outputPadding[d] >= std::max(stride[d], dilation[d]))
      fail(fmt::format("{}: output_padding {} must be smaller than the stride or the dilation", op, outputPadding[d]));
    SizePolynomial size = SizePolynomial::of(extent[d]);
    SizePolynomial reach =
        transposed ? size * SizePolynomial::constant(stride[d]) +
                         SizePolynomial::constant(-stride[d] - before[d] - after[d] + dilation[d] * (kernel[d] - 1) + outputPadding[d])
                   : size + SizePolynomial::constant(before[d] + after[d] - dilation[d] * (kernel[d] - 1) - 1);
    if (std::optional<int64_t> known = reach.constantValue(); known && *known < 0)
      fail(fmt::format("{}: spatial dim {} of size {} is too small for the kernel (the output would be empty)", op, d, extent[d].toString()));
    output[d] = windowCount(reach, transposed ? 1 : stride[d]);
  }

  // A convolution's weight is [O, C / groups, ...], a transposed one's [C, O / groups, ...].
  Dim groupCount = Dim::constant(groups);
  Dim rows = sizes_.resolve(w.shape[0]), columns = sizes_.resolve(w.shape[1]);
  std::optional<Dim> rowsPerGroup = rows.dividedBy(groupCount);
  if (!rowsPerGroup) fail(fmt::format("{}: the weight's {} rows are not a multiple of groups = {}", op, rows.toString(), groups));
  Dim inPerGroup = transposed ? *rowsPerGroup : columns, outPerGroup = transposed ? columns : *rowsPerGroup;
  Dim channels = transposed ? rows : columns * groupCount;
  if (!sizes_.unify(x.shape[lead - 1], channels))
    fail(fmt::format("{}: the input has {} channels where the weight takes {}", op, sizes_.resolve(x.shape[lead - 1]).toString(), channels.toString()));
  Dim outChannels = outPerGroup * groupCount;
  std::optional<Item> bias;
  if (const Item* given = optionalInput(node, "bias"); given && given->kind != Item::Kind::None) {
    bias = materialized(tensorOf(*given, "the bias"), "bias");
    if (bias->rank() != 1 || bias->dtype != x.dtype || !sizes_.unify(bias->shape[0], outChannels))
      fail(fmt::format("{}: the bias must be a vector of the {} output channels, of the input's type", op, outChannels.toString()));
  }

  std::string base = baseName(node->output(0));
  const std::string& source = x.code->text;
  Shape leading = sizes_.resolve(Shape(x.shape.begin(), x.shape.begin() + lead));
  bool padded = transposed || std::any_of(before.begin(), before.end(), [](int64_t p) { return p > 0; }) ||
                std::any_of(after.begin(), after.end(), [](int64_t p) { return p > 0; });

  std::string channel = claim("c");
  std::vector<std::string> window;
  for (const std::string& name : windowIndexNames(spatial)) window.push_back(claim(name));
  DType accumulator = windowAccumulator(x.dtype);
  auto widened = [&](CodePtr value) { return convertedCode(std::move(value), x.dtype, accumulator); };
  Shape shape(leading.begin(), leading.end() - 1);
  if (groups > 1) shape.push_back(groupCount);
  shape.push_back(outPerGroup);
  for (int d = 0; d < spatial; ++d) shape.push_back(output[d]);
  auto element = [&](const std::vector<CodePtr>& indices) {
    size_t at = lead - 1;
    CodePtr group = groups > 1 ? indices[at++] : nullptr;
    CodePtr localOut = indices[at++];
    auto global = [&](const CodePtr& local, const Dim& perGroup) {
      return group ? binaryCode("+", binaryCode("*", group, sizeCode(perGroup)), local) : local;
    };
    CodePtr inChannel = global(nameCode(channel), inPerGroup), outChannel = global(localOut, outPerGroup);
    std::vector<CodePtr> xs(indices.begin(), indices.begin() + lead - 1);
    xs.push_back(inChannel);
    std::vector<CodePtr> ws = transposed ? std::vector<CodePtr>{inChannel, localOut} : std::vector<CodePtr>{outChannel, nameCode(channel)};
    std::vector<std::pair<std::string, CodePtr>> bounds = {{channel, sizeCode(inPerGroup)}};
    CodePtr between;  // a transposed convolution's taps that fall between the input's elements
    for (int d = 0; d < spatial; ++d) {
      const CodePtr& position = indices[at + d];
      CodePtr tap = affineCode(nameCode(window[d]), dilation[d], 0);
      if (transposed) {
        CodePtr spread = binaryCode("-", affineCode(position, 1, before[d]), tap);
        xs.push_back(stride[d] == 1 ? spread : binaryCode("/", spread, numberCode(static_cast<double>(stride[d]), true)));
        CodePtr divides = binaryCode("==", binaryCode("%", spread, numberCode(static_cast<double>(stride[d]), true)), numberCode(0, true));
        if (stride[d] > 1) between = between ? binaryCode("and", between, divides) : divides;
      } else {
        xs.push_back(binaryCode("+", affineCode(position, stride[d], -before[d]), tap));
      }
      ws.push_back(nameCode(window[d]));
      bounds.emplace_back(window[d], numberCode(static_cast<double>(kernel[d]), true));
    }
    CodePtr read = padded ? paddedSubscriptCode(source, numberCode(0, true), xs) : subscriptCode(source, xs);
    CodePtr product = binaryCode("*", widened(read), widened(subscriptCode(w.code->text, ws)));
    if (between) product = callCode("where", {between, product, numberCode(0, true)});
    CodePtr value = reductionCode("sum", bounds, product);
    if (bias) value = binaryCode("+", value, widened(subscriptCode(bias->code->text, {outChannel})));
    return convertedCode(value, accumulator, x.dtype);
  };
  Item result = groups > 1 ? indexedAs(claim(base + "_grouped"), x.dtype, shape, element) : indexed(node->output(0), x.dtype, shape, element);
  taken_.erase(channel);
  for (const std::string& name : window) taken_.erase(name);
  if (groups == 1) return result;
  Shape merged(leading.begin(), leading.end() - 1);
  merged.push_back(outChannels);
  for (int d = 0; d < spatial; ++d) merged.push_back(output[d]);
  std::vector<CodePtr> listed;
  for (const Dim& dim : merged) listed.push_back(sizeCode(dim));
  return Item::tensor(x.dtype, merged, callCode("reshape", {result.code, listCode(listed)}));
}

// max_pool, avg_pool and their adaptive forms, with PyTorch's output sizes (ceil_mode's last window starts
// inside the input or its padding), padding read as -inf (max) or 0 (avg), and avg_pool's divisor: the
// window clipped to the padded input (count_include_pad) or to the input, or divisor_override. An adaptive
// pool whose output divides its input is the plain pool of that window; otherwise each output reads the
// whole dim under where(start <= k < end), start = floor(s * S / out), end = ceil((s + 1) * S / out).
Item Translator::pool(const std::string& kind, const Node* node) {
  std::string op = kind.substr(6);
  bool adaptive = op.rfind("adaptive_", 0) == 0, maximum = op.find("max") != std::string::npos;
  int spatial = op[op.size() - 2] - '0';  // max_pool2d
  Item x = materialized(tensorOf(input(node, "self"), "the pooled input"), baseName(node->input(0)));
  int lead = x.rank() - spatial;
  if (lead != 1 && lead != 2) fail(fmt::format("{} of a tensor of rank {}", op, x.rank()));
  if (!isFloat(x.dtype)) fail(fmt::format("{} of {}: floating-point inputs only", op, dtypeName(x.dtype)));
  std::vector<int64_t> kernel(spatial), stride(spatial), before(spatial, 0), dilation(spatial, 1);
  // Numbers, or a dim known at run time and the count of windows over it (floor mode only).
  std::vector<Dim> extent(spatial), output(spatial);
  std::vector<bool> uneven(spatial, false);  // adaptive dims whose windows differ
  for (int d = 0; d < spatial; ++d) extent[d] = sizes_.resolve(x.shape[lead + d]);
  std::vector<int64_t> known(spatial), counts(spatial);  // adaptive pools: the extents and counts
  bool includePad = true, ceil = false;
  std::optional<int64_t> divisor;
  if (adaptive) {
    counts = spatialInts(input(node, "output_size"), spatial, "output_size");
    for (int d = 0; d < spatial; ++d) {
      known[d] = knownExtent(x, lead + d, op);
      if (counts[d] < 1) fail(fmt::format("{}: output_size {} must be positive", op, counts[d]));
      uneven[d] = known[d] % counts[d] != 0;
      kernel[d] = uneven[d] ? known[d] : known[d] / counts[d];
      stride[d] = kernel[d];
      output[d] = Dim::constant(counts[d]);
    }
  } else {
    kernel = spatialInts(input(node, "kernel_size"), spatial, "kernel_size");
    const Item& strides = input(node, "stride");
    stride = strides.kind == Item::Kind::List && strides.elements.empty() ? kernel : spatialInts(strides, spatial, "stride");
    before = spatialInts(input(node, "padding"), spatial, "padding");
    if (maximum) dilation = spatialInts(input(node, "dilation"), spatial, "dilation");
    ceil = boolOf(input(node, "ceil_mode"), "ceil_mode");
    if (!maximum) {
      includePad = boolOf(input(node, "count_include_pad"), "count_include_pad");
      if (const Item* given = optionalInput(node, "divisor_override"); given && given->kind != Item::Kind::None) {
        divisor = intOf(*given, "divisor_override");
        if (*divisor < 1) fail("divisor_override must be positive");
      }
    }
    for (int d = 0; d < spatial; ++d) {
      if (kernel[d] < 1 || stride[d] < 1 || dilation[d] < 1 || before[d] < 0)
        fail(fmt::format("{}: kernel sizes, strides and dilations must be positive, paddings not negative", op));
      if (before[d] > kernel[d] / 2) fail(fmt::format("{}: padding {} is more than half the kernel size {}", op, before[d], kernel[d]));
      SizePolynomial reach = SizePolynomial::of(extent[d]) + SizePolynomial::constant(2 * before[d] - dilation[d] * (kernel[d] - 1) - 1);
      if (std::optional<int64_t> value = reach.constantValue(); value && *value < 0)
        fail(fmt::format("{}: spatial dim {} of size {} is too small for the window (the output would be empty)", op, d, extent[d].toString()));
      // ceil_mode rounds the count up, but drops a last window that would start in the right padding:
      // the lesser of the two counts (LANGUAGE.md's min of dimensions, a number where the dim is known).
      output[d] = windowCount(reach, stride[d]);
      if (ceil) {
        SizePolynomial rounded = SizePolynomial::of(windowCount(reach + SizePolynomial::constant(stride[d] - 1), stride[d]));
        SizePolynomial starts = SizePolynomial::of(windowCount(SizePolynomial::of(extent[d]) + SizePolynomial::constant(before[d] - 1), stride[d]));
        output[d] = tensor::derivedDim(derivedSizes_, tensor::extremePolynomial(derivedSizes_, tensor::DerivedSize::Kind::Minimum, rounded, starts),
                                       SizePolynomial::constant(1));
      }
    }
  }
  // Whether the last window of dim d may end past its first `extent + extra` elements: by arithmetic
  // where the dim is known; otherwise in floor mode windows end within the padded input, before +
  // extent, and in ceil_mode the last may end past it.
  auto endsPast = [&](int d, int64_t extra) {
    if (!extent[d].isConstant()) return ceil || extra < before[d];
    int64_t lastTap = (output[d].factor - 1) * stride[d] - before[d] + dilation[d] * (kernel[d] - 1);
    return lastTap > extent[d].factor + extra - 1;
  };
  // Where a window may leave the input (padding, or ceil_mode's last window), it reads through pad().
  bool padded = false;
  for (int d = 0; d < spatial; ++d) padded = padded || (!uneven[d] && (before[d] > 0 || endsPast(d, 0)));

  std::vector<std::string> window;
  for (const std::string& name : windowIndexNames(spatial)) window.push_back(claim(name));
  DType accumulator = windowAccumulator(x.dtype);
  Shape shape = sizes_.resolve(Shape(x.shape.begin(), x.shape.begin() + lead));
  for (int d = 0; d < spatial; ++d) shape.push_back(output[d]);
  const std::string& source = x.code->text;
  auto element = [&](const std::vector<CodePtr>& indices) {
    std::vector<CodePtr> subscripts(indices.begin(), indices.begin() + lead);
    std::vector<std::pair<std::string, CodePtr>> bounds;
    CodePtr inside;  // of the uneven dims' windows
    std::vector<CodePtr> insideEach(spatial);
    for (int d = 0; d < spatial; ++d) {
      const CodePtr& position = indices[lead + d];
      CodePtr tap = nameCode(window[d]);
      bounds.emplace_back(window[d], numberCode(static_cast<double>(kernel[d]), true));
      if (!uneven[d]) {
        subscripts.push_back(binaryCode("+", affineCode(position, stride[d], -before[d]), affineCode(tap, dilation[d], 0)));
        continue;
      }
      // k >= floor(s * S / out) and k < ceil((s + 1) * S / out), multiplied out.
      subscripts.push_back(tap);
      CodePtr scaled = affineCode(tap, counts[d], 0), start = affineCode(position, known[d], 0);
      insideEach[d] = binaryCode("and", binaryCode(">", affineCode(tap, counts[d], counts[d]), start),
                                 binaryCode("<", scaled, affineCode(position, known[d], known[d])));
      inside = inside ? binaryCode("and", inside, insideEach[d]) : insideEach[d];
    }
    CodePtr fill = maximum ? numberCode(-INFINITY, false) : numberCode(0, true);
    CodePtr read = padded ? paddedSubscriptCode(source, fill, subscripts) : subscriptCode(source, subscripts);
    if (maximum) return reductionCode("max", bounds, inside ? callCode("where", {inside, read, fill}) : read);
    read = convertedCode(read, x.dtype, accumulator);
    CodePtr sum = reductionCode("sum", bounds, inside ? callCode("where", {inside, read, numberCode(0, true)}) : read);
    // The divisor: a number where every window has the same, else a product of per-dim counts.
    int64_t constant = divisor.value_or(1);
    CodePtr count;
    for (int d = 0; d < spatial && !divisor; ++d) {
      CodePtr here;
      if (uneven[d]) {
        here = reductionCode("sum", {bounds[d]}, callCode("where", {insideEach[d], numberCode(1, true), numberCode(0, true)}));
      } else {
        int64_t extra = includePad ? before[d] : 0;
        bool clippedBelow = !includePad && before[d] > 0, clippedAbove = endsPast(d, extra);
        if (!clippedBelow && !clippedAbove) {
          constant *= kernel[d];
          continue;
        }
        const CodePtr& position = indices[lead + d];
        CodePtr end = affineCode(position, stride[d], kernel[d] - before[d]);
        if (clippedAbove) end = callCode("min", {end, affineCode(sizeCode(extent[d]), 1, extra)});
        CodePtr start = affineCode(position, stride[d], -before[d]);
        if (clippedBelow) start = callCode("max", {start, numberCode(0, true)});
        here = binaryCode("-", end, start);
      }
      count = count ? binaryCode("*", count, here) : here;
    }
    if (count && constant != 1) count = binaryCode("*", count, numberCode(static_cast<double>(constant), true));
    CodePtr mean = binaryCode("/", sum, count ? convertedCode(count, DType::I64, accumulator) : numberCode(static_cast<double>(constant), false));
    return convertedCode(mean, accumulator, x.dtype);
  };
  Item result = indexed(node->output(0), x.dtype, shape, element);
  for (const std::string& name : window) taken_.erase(name);
  return result;
}

// einsum in index form: one index per label, the output's labels on the left, a sum over the others
// (bounded by their sizes, which every operand that has the label must share), the operands multiplied.
// Without `->`, the output is the labels that appear once, in alphabetical order, as PyTorch's.
Item Translator::einsum(const Node* node) {
  const Item& equationItem = input(node, "equation");
  if (equationItem.kind != Item::Kind::Text) fail("einsum's equation must be a string known when the model is imported");
  std::string equation;
  for (char c : equationItem.text)
    if (c != ' ') equation += c;
  if (equation.find('.') != std::string::npos) fail("einsum with an ellipsis (...) is not supported");
  const Item& list = input(node, "tensors");
  if (list.kind != Item::Kind::List || list.elements.empty()) fail("einsum of something other than a list of tensors");
  size_t arrow = equation.find("->");
  std::string left = equation.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    size_t comma = left.find(',', start);
    terms.push_back(left.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != list.elements.size())
    fail(fmt::format("einsum's equation has {} operands, the call {}", terms.size(), list.elements.size()));
  std::map<char, Dim> extents;
  std::map<char, int> uses;
  std::vector<Item> operands;
  DType dtype = tensorOf(list.elements[0], "an einsum operand").dtype;
  for (const Item& element : list.elements) dtype = promote(dtype, tensorOf(element, "an einsum operand").dtype);
  for (size_t k = 0; k < terms.size(); ++k) {
    operands.push_back(materialized(castTo(dtype, tensorOf(list.elements[k], "an einsum operand")), "einsum_operand"));
    if (static_cast<int>(terms[k].size()) != operands[k].rank())
      fail(fmt::format("einsum's operand {} has rank {}, its term '{}' {} labels", k, operands[k].rank(), terms[k], terms[k].size()));
    for (size_t d = 0; d < terms[k].size(); ++d) {
      char label = terms[k][d];
      if (!std::isalpha(static_cast<unsigned char>(label))) fail(fmt::format("einsum's equation has '{}' where a label belongs", label));
      ++uses[label];
      auto [it, fresh] = extents.emplace(label, operands[k].shape[d]);
      if (!fresh && !sizes_.unify(it->second, operands[k].shape[d]))
        fail(fmt::format("einsum: label '{}' stands for dims of sizes {} and {}", label, sizes_.resolve(it->second).toString(),
                         sizes_.resolve(operands[k].shape[d]).toString()));
    }
  }
  std::string output;
  if (arrow != std::string::npos) {
    output = equation.substr(arrow + 2);
  } else {
    for (const auto& [label, count] : uses)
      if (count == 1) output += label;
  }
  std::map<char, std::string> names;
  for (char label : output) {
    if (!extents.count(label)) fail(fmt::format("einsum's output label '{}' is in no operand", label));
    if (names.count(label)) fail(fmt::format("einsum's output repeats label '{}'", label));
    names[label] = claim(std::string(1, label));
  }
  std::vector<std::pair<std::string, CodePtr>> summed;
  for (const auto& [label, extent] : extents)
    if (!names.count(label)) {
      names[label] = claim(std::string(1, label));
      summed.emplace_back(names[label], sizeCode(sizes_.resolve(extent)));
    }
  CodePtr product;
  for (size_t k = 0; k < terms.size(); ++k) {
    std::vector<CodePtr> subscripts;
    for (char label : terms[k]) subscripts.push_back(nameCode(names[label]));
    CodePtr read = subscriptCode(operands[k].code->text, subscripts);
    product = product ? binaryCode("*", product, read) : read;
  }
  Shape shape;
  std::vector<std::string> indices;
  for (char label : output) shape.push_back(sizes_.resolve(extents.at(label))), indices.push_back(names.at(label));
  const Value* out = node->output(0);
  auto named = outputNames_.find(out);
  std::string target = named != outputNames_.end() ? named->second.front() : claim(baseName(out));
  program_.statements.push_back({target, indices, summed.empty() ? product : reductionCode("sum", summed, product), shape});
  for (const auto& [label, name] : names) taken_.erase(name);
  return Item::tensor(dtype, shape, nameCode(target));
}

bool Translator::translateSplit(const std::string& kind, const Node* node) {
  static const std::set<std::string> kinds = {"aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unsafe_split",
                                              "aten::unsafe_chunk", "aten::broadcast_tensors", "aten::repeat"};
  if (!kinds.count(kind)) return false;
  const Value* out = node->output(0);
  std::string base = baseName(out);
  if (kind == "aten::broadcast_tensors") {
    const Item& list = input(node, "tensors");
    if (list.kind != Item::Kind::List) fail("broadcast_tensors of something other than a list of tensors");
    Shape shape;
    for (const Item& element : list.elements) shape = broadcast(shape, tensorOf(element, "a broadcast tensor").shape);
    std::vector<CodePtr> listed;
    for (const Dim& dim : shape) listed.push_back(sizeCode(dim));
    Item result = Item::of(Item::Kind::List);
    for (const Item& element : list.elements)
      result.elements.push_back(sizes_.resolve(element.shape) == sizes_.resolve(shape)
                                    ? element
                                    : Item::tensor(element.dtype, shape, callCode("broadcast_to", {element.code, listCode(listed)})));
    define(out, result);
    return true;
  }
  Item x = materialized(tensorOf(input(node, "self"), "the operand"), baseName(node->input(0)));
  if (kind == "aten::repeat") {
    // [n0, n1] repeated [r0, r1]: [1, n0, 1, n1] broadcast to [r0, n0, r1, n1], reshaped to [r0 * n0, r1 * n1].
    std::vector<int64_t> repeats = intsOf(input(node, "repeats"), "repeat's counts");
    if (static_cast<int>(repeats.size()) < x.rank()) fail("repeat needs a count for every dim of the tensor");
    Shape dims(repeats.size() - x.rank(), Dim::constant(1));
    for (const Dim& dim : x.shape) dims.push_back(sizes_.resolve(dim));
    std::vector<CodePtr> spread, broadcastTo, merged;
    Shape shape;
    for (size_t d = 0; d < repeats.size(); ++d) {
      if (repeats[d] < 1) fail("repeat counts must be positive");
      spread.insert(spread.end(), {numberCode(1, true), sizeCode(dims[d])});
      broadcastTo.insert(broadcastTo.end(), {numberCode(static_cast<double>(repeats[d]), true), sizeCode(dims[d])});
      shape.push_back(Dim::constant(repeats[d]) * dims[d]);
      merged.push_back(sizeCode(shape.back()));
    }
    CodePtr code = callCode("reshape", {callCode("broadcast_to", {callCode("reshape", {x.code, listCode(spread)}), listCode(broadcastTo)}), listCode(merged)});
    define(out, Item::tensor(x.dtype, shape, code));
    return true;
  }
  // split, split_with_sizes and chunk: slices along a dim known when imported, each a statement.
  int dim = axis(intOf(input(node, "dim"), "the split dim"), x.rank());
  Dim extent = sizes_.resolve(x.shape[dim]);
  if (!extent.isConstant() || extent.factor == 0)
    fail(fmt::format("{} of a dim only known at run time ({}): give it with --input", kind.substr(6), extent.toString()));
  int64_t size = extent.factor;
  std::vector<int64_t> lengths;
  if (kind == "aten::split_with_sizes" || (kind == "aten::split" && input(node, "split_size").kind == Item::Kind::List)) {
    lengths = intsOf(input(node, kind == "aten::split" ? "split_size" : "split_sizes"), "the split sizes");
    int64_t total = 0;
    for (int64_t length : lengths) total += length;
    if (total != size) fail(fmt::format("split sizes that add up to {}, not the dim's {}", total, size));
  } else {
    bool chunks = kind == "aten::chunk" || kind == "aten::unsafe_chunk";
    int64_t count = intOf(input(node, chunks ? "chunks" : "split_size"), chunks ? "the number of chunks" : "the split size");
    if (count < 1) fail(fmt::format("{} must be positive", chunks ? "the number of chunks" : "the split size"));
    int64_t part = chunks ? (size + count - 1) / count : count;
    for (int64_t start = 0; start < size; start += part) lengths.push_back(std::min(part, size - start));
  }
  Item result = Item::of(Item::Kind::List);
  int64_t start = 0;
  for (int64_t length : lengths) {
    if (length < 1) fail("a split part with no elements is not supported");
    Shape shape = x.shape;
    shape[dim] = Dim::constant(length);
    result.elements.push_back(length == size ? x : indexedAs(claim(base + "_part"), x.dtype, shape, sliceElement(x.code->text, dim, start, 1)));
    start += length;
  }
  define(out, result);
  return true;
}

// batch_norm (inference: the running statistics), instance_norm (each sample's own statistics over its
// spatial dims) and group_norm (each sample's over groups of channels), then weight and bias per channel.
Item Translator::batchNorm(const std::string& kind, const Node* node) {
  Item x = tensorOf(input(node, "input"), "the normalised input");
  if (x.rank() < 2) fail(fmt::format("{} of a tensor of rank {} (it needs [N, C, ...])", kind, x.rank()));
  if (!isFloat(x.dtype)) fail(fmt::format("{} needs a floating-point input", kind));
  double eps = numberOf(input(node, "eps"), "eps");
  std::string base = baseName(node->output(0));
  Item wide = materialized(castTo(promote(x.dtype, DType::F32), x), baseName(node->input(0)));
  Item result;
  if (kind == "aten::batch_norm" && !boolOf(input(node, "training"), "training")) {
    Item mean = channelVector(input(node, "running_mean"), x.rank()), variance = channelVector(input(node, "running_var"), x.rank());
    Item scale = Item::tensor(variance.dtype, variance.shape, callCode("rsqrt", {binaryCode("+", variance.code, numberCode(eps, false))}));
    result = elementwise("*", elementwise("-", wide, mean), scale);
  } else if (kind == "aten::instance_norm" || kind == "aten::batch_norm") {  // batch_norm training: the batch's
    if (kind == "aten::instance_norm" && !boolOf(input(node, "use_input_stats"), "use_input_stats"))
      fail("instance_norm with running statistics is not supported");
    std::vector<int> axes;
    for (int d = kind == "aten::batch_norm" ? 0 : 2; d < x.rank(); ++d)
      if (d != 1) axes.push_back(d);
    if (axes.empty()) fail(fmt::format("{} of a tensor without spatial dims", kind));
    result = standardized(wide, axes, eps, base);
  } else {  // group_norm: [N, C, ...] seen as [N, G, C / G * ...], standardized over its last axis
    int64_t groups = intOf(input(node, "num_groups"), "num_groups");
    Dim channels = sizes_.resolve(x.shape[1]);
    if (!channels.isConstant() || groups < 1 || channels.factor % groups != 0)
      fail(fmt::format("group_norm of {} channels in {} groups (the channels must be a number the groups divide)", channels.toString(), groups));
    Dim rest = Dim::constant(channels.factor / groups);
    for (int d = 2; d < x.rank(); ++d) rest = rest * sizes_.resolve(x.shape[d]);
    Item grouped = Item::tensor(wide.dtype, {sizes_.resolve(x.shape[0]), Dim::constant(groups), rest},
                                callCode("reshape", {wide.code, listCode({sizeCode(sizes_.resolve(x.shape[0])), numberCode(static_cast<double>(groups), true), sizeCode(rest)})}));
    grouped = materialized(grouped, base + "_groups");
    Item normal = standardized(grouped, {2}, eps, base);
    std::vector<CodePtr> back;
    for (const Dim& dim : x.shape) back.push_back(sizeCode(sizes_.resolve(dim)));
    result = Item::tensor(wide.dtype, x.shape, callCode("reshape", {normal.code, listCode(back)}));
  }
  for (const char* name : {"weight", "bias"}) {
    const Item& parameter = input(node, name);
    if (parameter.kind == Item::Kind::None) continue;
    result = elementwise(std::string(name) == "weight" ? "*" : "+", result, channelVector(parameter, x.rank()));
  }
  return castTo(x.dtype, result);
}

Item Translator::layerNorm(const Node* node) {
  Item x = tensorOf(input(node, "input"), "layer_norm's input");
  std::vector<int64_t> normalized = intsOf(input(node, "normalized_shape"), "normalized_shape");
  double eps = numberOf(input(node, "eps"), "eps");
  if (normalized.empty() || static_cast<int>(normalized.size()) > x.rank()) fail("normalized_shape does not fit the input");
  for (size_t k = 0; k < normalized.size(); ++k)
    if (!sizes_.unify(x.shape[x.rank() - normalized.size() + k], Dim::constant(normalized[k])))
      fail(fmt::format("normalized_shape {} does not match the input's shape {}", c10::str(normalized), shapeToString(sizes_.resolve(x.shape))));
  DType outer = x.dtype;
  if (!isFloat(outer)) fail("layer_norm needs a floating-point input");
  Item wide = materialized(castTo(promote(outer, DType::F32), x), baseName(node->input(0)));
  std::vector<int> axes;
  for (size_t k = normalized.size(); k > 0; --k) axes.push_back(x.rank() - static_cast<int>(k));
  Shape shape = x.shape;
  Item result = standardized(wide, axes, eps, baseName(node->output(0)));
  for (const char* name : {"weight", "bias"}) {
    const Item& parameter = input(node, name);
    if (parameter.kind == Item::Kind::None) continue;
    broadcast(shape, tensorOf(parameter, name).shape);
    result = elementwise(std::string(name) == "weight" ? "*" : "+", result, parameter);
  }
  return castTo(outer, result);
}

// Scaled dot-product attention (aten::_scaled_dot_product_attention of PyTorch 1.13, or
// aten::scaled_dot_product_attention): softmax(q @ k^T * scale [+ mask]) @ v; a causal mask keeps
// key j <= query i.
Item Translator::attention(const Node* node) {
  const Item& q = tensorOf(input(node, "query"), "query");
  const Item& k = tensorOf(input(node, "key"), "key");
  const Item& v = tensorOf(input(node, "value"), "value");
  if (q.rank() < 2) fail("attention needs queries of rank 2 or more");
  if (const Item* dropout = optionalInput(node, "dropout_p"); dropout && numberOf(*dropout, "dropout_p") != 0)
    fail("attention with dropout is not supported");
  bool causal = boolOf(input(node, "is_causal"), "is_causal");
  std::string base = baseName(node->output(0));
  Dim depth = sizes_.resolve(q.shape.back());
  Item scale = Item::ofSize(depth);
  if (const Item* given = optionalInput(node, "scale"); given && given->kind != Item::Kind::None) {
    scale = Item::ofNumber(numberOf(*given, "scale"), false);
  } else if (depth.isConstant()) {
    scale = Item::ofNumber(1 / std::sqrt(static_cast<double>(depth.factor)), false);
  } else {
    fail("attention over a depth only known at run time needs a scale");
  }
  Item keysT = Item::tensor(k.dtype, k.shape, callCode("transpose", {k.code, numberCode(-2, true), numberCode(-1, true)}));
  std::swap(keysT.shape[k.rank() - 1], keysT.shape[k.rank() - 2]);
  Item scores = elementwise("*", matmul(q, keysT), scale);
  scores.code = nameCode(emit(base + "_scores", scores.code));
  if (causal) {
    std::vector<std::string> indices;
    for (int d = 0; d + 2 < scores.rank(); ++d) indices.push_back(claim(scores.rank() == 4 ? (d == 0 ? "b" : "h") : fmt::format("a{}", d)));
    std::string i = claim("i"), j = claim("j");
    indices.push_back(i), indices.push_back(j);
    std::vector<CodePtr> subscripts;
    for (const std::string& index : indices) subscripts.push_back(nameCode(index));
    const std::string& scoresName = scores.code->text;
    CodePtr masked = callCode("where", {binaryCode("<=", nameCode(j), nameCode(i)), subscriptCode(scoresName, subscripts),
                                        unaryCode("-", numberCode(INFINITY, false))});
    scores.code = nameCode(emit(base + "_masked", masked, indices));
    for (const std::string& index : indices) taken_.erase(index);
  }
  if (const Item* mask = optionalInput(node, "attn_mask"); mask && mask->kind != Item::Kind::None) {
    const Item& m = tensorOf(*mask, "attn_mask");
    scores = m.dtype == DType::Bool
                 ? Item::tensor(scores.dtype, broadcast(scores.shape, m.shape),
                                callCode("where", {m.code, scores.code, unaryCode("-", numberCode(INFINITY, false))}))
                 : elementwise("+", scores, m);
  }
  Item weights = Item::tensor(scores.dtype, scores.shape, callCode("softmax", {scores.code}, {{"axis", numberCode(-1, true)}}));
  weights.code = nameCode(emit(base + "_weights", weights.code));
  if (node->outputs().size() > 1) define(node->output(1), weights);
  return matmul(weights, v);
}

// Each node in order; one that cannot be translated is reported and poisons what it defines.
void Translator::translateBlock(const torch::jit::Block* block) {
  for (const Node* node : block->nodes()) {
    try {
      translate(node);
    } catch (const NodeError& error) {
      report(node, error.message);
      for (const Value* out : node->outputs()) poisoned_.insert(out);
    } catch (const UsageError& error) {
      report(node, error.what());
      for (const Value* out : node->outputs()) poisoned_.insert(out);
    }
  }
}

void Translator::translate(const Node* node) {
  std::string kind = node->kind().toQualString();
  for (const Value* in : node->inputs())
    if (poisoned_.count(in)) {
      for (const Value* out : node->outputs()) poisoned_.insert(out);
      return;
    }
  if (kind == "prim::GetAttr") return define(node->output(0), attribute(node));
  // A branch on what the import knows (the module's attributes, ranks, a preserved buffer being there or
  // None, as in BatchNorm's `if self.training` and `running_mean is None`): the taken block is translated
  // in place.
  if (kind == "prim::If") {
    const Item& condition = item(node->input(0));
    if (condition.kind != Item::Kind::Number || !condition.boolean)
      fail("a branch on a value only known when the model runs (prim::If) is not supported");
    const torch::jit::Block* taken = node->blocks()[condition.number != 0 ? 0 : 1];
    translateBlock(taken);
    for (size_t k = 0; k < node->outputs().size(); ++k) {
      const Value* result = taken->outputs()[k];
      if (poisoned_.count(result)) poisoned_.insert(node->output(k));
      else define(node->output(k), item(result));
    }
    return;
  }
  if (kind == "aten::__is__" || kind == "aten::__isnot__") {
    const Item &a = item(node->input(0)), &b = item(node->input(1));
    if (a.kind != Item::Kind::None && b.kind != Item::Kind::None) fail(fmt::format("{} of two values neither of which is None", kind));
    bool same = a.kind == b.kind;
    return define(node->output(0), Item::ofNumber(same == (kind == "aten::__is__"), true, true));
  }
  if (kind == "aten::__contains__") {
    // `key in [...]` of numbers or strings the import knows.
    const Item &container = item(node->input(0)), &key = item(node->input(1));
    auto known = [](const Item& value) { return value.kind == Item::Kind::Number || value.kind == Item::Kind::Text; };
    if (container.kind != Item::Kind::List || !known(key) || !std::all_of(container.elements.begin(), container.elements.end(), known))
      fail("`in` of values only known when the model runs (the import knows lists of numbers and strings)");
    bool found = std::any_of(container.elements.begin(), container.elements.end(), [&](const Item& element) {
      return element.kind == key.kind && (key.kind == Item::Kind::Text ? element.text == key.text : element.number == key.number);
    });
    return define(node->output(0), Item::ofNumber(found, true, true));
  }
  if (kind == "aten::__not__") {
    const Item& a = item(node->input(0));
    if (a.kind != Item::Kind::Number) fail("not of a value only known when the model runs is not supported");
    return define(node->output(0), Item::ofNumber(a.number == 0, true, true));
  }
  if (kind == "prim::RaiseException") fail("the model raises an exception here for the inputs it was given");
  if (translateScalar(kind, node) ||
      (!node->outputs().empty() && (translateView(kind, node) || translateIndexedView(kind, node) || translateJoin(kind, node) ||
                                     translateSplit(kind, node) || translateWindowed(kind, node))))
    return;

  static const std::map<std::string, std::string> binaries = {
      {"aten::add", "+"}, {"aten::sub", "-"}, {"aten::mul", "*"}, {"aten::div", "/"}, {"aten::floordiv", "//"},
      {"aten::eq", "=="}, {"aten::ne", "!="}, {"aten::lt", "<"}, {"aten::le", "<="}, {"aten::gt", ">"},
      {"aten::ge", ">="}, {"aten::logical_and", "and"}, {"aten::logical_or", "or"}, {"aten::__and__", "and"},
      {"aten::__or__", "or"}};
  static const std::map<std::string, std::pair<std::string, bool>> functions = {
      {"aten::exp", {"exp", true}},   {"aten::log", {"log", true}},         {"aten::sqrt", {"sqrt", true}},
      {"aten::rsqrt", {"rsqrt", true}}, {"aten::sin", {"sin", true}},       {"aten::cos", {"cos", true}},
      {"aten::tanh", {"tanh", true}}, {"aten::erf", {"erf", true}},         {"aten::sigmoid", {"sigmoid", true}},
      {"aten::silu", {"silu", true}}, {"aten::relu", {"relu", false}},      {"aten::abs", {"abs", false}}};
  const Value* out = node->outputs().empty() ? nullptr : node->output(0);
  auto operand = [&](size_t k) -> const Item& { return item(node->input(k)); };

  if (auto binary = binaries.find(kind); binary != binaries.end()) {
    Item a = operand(0), b = operand(1);
    if (const Item* alpha = optionalInput(node, "alpha"); alpha && !(alpha->kind == Item::Kind::Number && alpha->number == 1))
      b = elementwise("*", *alpha, b);
    if (const Item* mode = optionalInput(node, "rounding_mode"); mode && mode->kind != Item::Kind::None)
      fail(fmt::format("division with rounding_mode='{}' is not supported", mode->text));
    if (binary->second == "//" && (a.kind == Item::Kind::Tensor || b.kind == Item::Kind::Tensor))
      fail("floor division of tensors is not supported");
    return define(out, elementwise(binary->second, a, b));
  }
  if (kind == "aten::rsub") {
    Item b = operand(1);
    if (const Item* alpha = optionalInput(node, "alpha"); alpha && !(alpha->kind == Item::Kind::Number && alpha->number == 1))
      return define(out, elementwise("-", b, elementwise("*", *alpha, operand(0))));
    return define(out, elementwise("-", b, operand(0)));
  }
  if (auto builtin = functions.find(kind); builtin != functions.end() && operand(0).kind == Item::Kind::Tensor)
    return define(out, function(builtin->second.first, operand(0), builtin->second.second));
  if (kind == "aten::neg") {
    const Item& x = tensorOf(operand(0), "the operand");
    return define(out, Item::tensor(x.dtype, x.shape, unaryCode("-", x.code)));
  }
  if (kind == "aten::logical_not" || kind == "aten::bitwise_not") {
    const Item& x = tensorOf(operand(0), "the operand");
    if (x.dtype != DType::Bool) fail(fmt::format("{} of a {} tensor is not supported", kind, dtypeName(x.dtype)));
    return define(out, Item::tensor(DType::Bool, x.shape, unaryCode("not", x.code)));
  }
  if (kind == "aten::pow") {
    Item a = operand(0), b = operand(1);
    if (a.kind != Item::Kind::Tensor && b.kind != Item::Kind::Tensor) return define(out, scalarArithmetic("**", a, b));
    DType type = arithmeticType(a, b);
    Shape shape = broadcast(a.kind == Item::Kind::Tensor ? a.shape : Shape{}, b.kind == Item::Kind::Tensor ? b.shape : Shape{});
    if (a.kind == Item::Kind::Tensor && a.dtype != type) a = castTo(type, a);
    if (b.kind == Item::Kind::Tensor && b.dtype != type) b = castTo(type, b);
    return define(out, Item::tensor(type, shape, callCode("pow", {operandCode(a, type), operandCode(b, type)})));
  }
  if (kind == "aten::maximum" || kind == "aten::minimum")
    return define(out, pairwise(kind == "aten::maximum" ? "max" : "min", tensorOf(operand(0), "the operand"), tensorOf(operand(1), "the operand")));
  if (kind == "aten::gelu") {
    const Item* approximate = optionalInput(node, "approximate");
    std::string form = approximate ? approximate->text : "none";
    if (form == "none") return define(out, function("gelu", operand(0), true));
    if (form != "tanh") fail(fmt::format("gelu with approximate='{}' is not supported", form));
    return define(out, nnFunction("gelu_tanh", operand(0)));
  }
  // Activations the standard library defines as fns, with PyTorch's defaults; other arguments are spelled
  // out around them.
  static const std::set<std::string> nnActivations = {"mish", "selu", "hardsigmoid", "hardswish", "log_sigmoid"};
  if (nnActivations.count(kind.substr(6))) {
    std::string name = kind == "aten::log_sigmoid" ? "logsigmoid" : kind.substr(6);
    return define(out, nnFunction(name, operand(0)));
  }
  if (kind == "aten::elu" || kind == "aten::celu") {
    CodePtr alpha = operandCode(input(node, "alpha"), DType::F32);
    if (kind == "aten::elu" && (numberOf(input(node, "scale"), "elu's scale") != 1 || numberOf(input(node, "input_scale"), "elu's input_scale") != 1))
      fail("elu with a scale or input_scale other than 1 is not supported");
    return define(out, nnFunction(kind.substr(6), operand(0), {alpha}));
  }
  if (kind == "aten::softplus") {
    double beta = numberOf(input(node, "beta"), "softplus's beta"), threshold = numberOf(input(node, "threshold"), "softplus's threshold");
    if (beta == 1 && threshold == 20) return define(out, nnFunction("softplus", operand(0)));
    // (1 / beta) * log(1 + exp(beta * x)), and x itself where beta * x exceeds the threshold.
    const Item& tensor = tensorOf(operand(0), "the operand");
    Item x = materialized(isFloat(tensor.dtype) ? tensor : castTo(DType::F32, tensor), baseName(node->input(0)));
    CodePtr scaled = binaryCode("*", numberCode(beta, false), x.code);
    CodePtr soft = binaryCode("/", callCode("log", {binaryCode("+", numberCode(1, true), callCode("exp", {scaled}))}), numberCode(beta, false));
    return define(out, Item::tensor(x.dtype, x.shape, callCode("where", {binaryCode(">", scaled, numberCode(threshold, false)), x.code, soft})));
  }
  static const std::set<std::string> losses = {"aten::mse_loss", "aten::l1_loss", "aten::smooth_l1_loss", "aten::huber_loss",
                                               "aten::kl_div", "aten::binary_cross_entropy", "aten::binary_cross_entropy_with_logits",
                                               "aten::hinge_embedding_loss", "aten::soft_margin_loss", "aten::triplet_margin_loss"};
  if (losses.count(kind)) return define(out, loss(kind, node), true);
  if (kind == "aten::cross_entropy_loss" || kind == "aten::nll_loss" || kind == "aten::nll_loss_nd")
    return define(out, classLoss(kind, node), true);
  if (kind == "aten::reciprocal" || kind == "aten::square" || kind == "aten::log1p" || kind == "aten::expm1" || kind == "aten::sign") {
    Item x = materialized(tensorOf(operand(0), "the operand"), baseName(node->input(0)));
    if (kind == "aten::square") return define(out, elementwise("*", x, x));
    if (kind == "aten::sign") {  // NaN and 0 give themselves
      CodePtr one = numberCode(1, !isFloat(x.dtype));
      if (x.dtype == DType::Bool) return define(out, x);
      CodePtr negative = callCode("where", {binaryCode("<", x.code, numberCode(0, true)), unaryCode("-", one), x.code});
      return define(out, Item::tensor(x.dtype, x.shape, callCode("where", {binaryCode(">", x.code, numberCode(0, true)), one, negative})));
    }
    Item wide = isFloat(x.dtype) ? x : castTo(DType::F32, x);
    if (kind == "aten::reciprocal") return define(out, elementwise("/", Item::ofNumber(1, false), wide));
    if (kind == "aten::log1p") return define(out, function("log", elementwise("+", Item::ofNumber(1, false), wide), true));
    return define(out, elementwise("-", function("exp", wide, true), Item::ofNumber(1, false)));
  }
  if (kind == "aten::relu6") {
    const Item& x = tensorOf(operand(0), "the operand");
    return define(out, Item::tensor(x.dtype, x.shape, callCode("clamp", {x.code, numberCode(0, true), numberCode(6, true)})));
  }
  if (kind == "aten::leaky_relu") {
    Item x = materialized(tensorOf(operand(0), "the operand"), baseName(node->input(0)));
    const Item& slope = input(node, "negative_slope");
    Item scaled = elementwise("*", slope, x);
    return define(out, Item::tensor(x.dtype, x.shape, callCode("where", {binaryCode(">", x.code, numberCode(0, true)), x.code, scaled.code})));
  }
  if (kind == "aten::clamp" || kind == "aten::hardtanh" || kind == "aten::clamp_min" || kind == "aten::clamp_max") {
    const Item& x = tensorOf(operand(0), "the operand");
    const Item* low = optionalInput(node, kind == "aten::hardtanh" ? "min_val" : "min");
    const Item* high = optionalInput(node, kind == "aten::hardtanh" ? "max_val" : "max");
    if (low && low->kind == Item::Kind::None) low = nullptr;
    if (high && high->kind == Item::Kind::None) high = nullptr;
    Item result = x;
    for (const Item* bound : {low, high})
      if (bound && bound->kind == Item::Kind::Tensor) result.shape = broadcast(result.shape, bound->shape);
    if (low && high) result.code = callCode("clamp", {x.code, operandCode(*low, x.dtype), operandCode(*high, x.dtype)});
    else if (low) result.code = callCode("max", {x.code, operandCode(*low, x.dtype)});
    else if (high) result.code = callCode("min", {x.code, operandCode(*high, x.dtype)});
    return define(out, result);
  }
  if (kind == "aten::where" && node->inputs().size() == 3) return define(out, select(operand(0), operand(1), operand(2)));
  if (kind == "aten::masked_fill") {
    const Item& x = tensorOf(operand(0), "the operand");
    const Item& mask = tensorOf(input(node, "mask"), "the mask");
    const Item& value = input(node, "value");
    Shape shape = broadcast(x.shape, mask.shape);
    if (shape.size() != x.shape.size()) fail("masked_fill's mask has more dimensions than the tensor");
    return define(out, Item::tensor(x.dtype, shape, callCode("where", {mask.code, operandCode(value, x.dtype), x.code})));
  }
  if (kind == "aten::matmul" || kind == "aten::mm" || kind == "aten::bmm") return define(out, matmul(operand(0), operand(1)), true);
  if (kind == "aten::linear") {
    const Item& weight = tensorOf(input(node, "weight"), "linear's weight");
    Item transposed = weight;
    if (weight.rank() == 2) {
      transposed.code = callCode("transpose", {weight.code, numberCode(0, true), numberCode(1, true)});
      std::swap(transposed.shape[0], transposed.shape[1]);
    }
    Item result = matmul(input(node, "input"), transposed);
    if (const Item& bias = input(node, "bias"); bias.kind != Item::Kind::None) result = elementwise("+", result, bias);
    return define(out, result, true);
  }
  if (kind == "aten::addmm") {
    Item product = matmul(input(node, "mat1"), input(node, "mat2"));
    const Item &alpha = input(node, "alpha"), &beta = input(node, "beta");
    if (numberOf(alpha, "alpha") != 1) product = elementwise("*", alpha, product);
    Item bias = input(node, "self");
    if (numberOf(beta, "beta") != 1) bias = elementwise("*", beta, bias);
    return define(out, elementwise("+", product, bias), true);
  }
  if (kind == "aten::softmax" || kind == "aten::log_softmax") {
    Item x = tensorOf(input(node, "self"), "the operand");
    if (std::optional<DType> dtype = dtypeArgument(optionalInput(node, "dtype"))) x = castTo(*dtype, x);
    if (!isFloat(x.dtype)) fail(fmt::format("{} of an integer tensor needs a floating-point dtype", kind));
    int64_t dim = intOf(input(node, "dim"), "softmax's dim");
    axis(dim, x.rank());
    return define(out, Item::tensor(x.dtype, x.shape, callCode(kind == "aten::softmax" ? "softmax" : "log_softmax", {x.code}, {{"axis", numberCode(static_cast<double>(dim), true)}})), true);
  }
  if (kind == "aten::layer_norm") return define(out, layerNorm(node));
  if (kind == "aten::batch_norm" || kind == "aten::instance_norm" || kind == "aten::group_norm") return define(out, batchNorm(kind, node), true);
  if (kind == "aten::sum" || kind == "aten::mean" || kind == "aten::amax" || kind == "aten::amin") {
    std::string callee = kind == "aten::amax" ? "max" : kind == "aten::amin" ? "min" : kind.substr(6);
    const Item* keepdim = optionalInput(node, "keepdim");
    return define(out, reduce(callee, operand(0), optionalInput(node, "dim"), keepdim && boolOf(*keepdim, "keepdim"),
                              dtypeArgument(optionalInput(node, "dtype"))), true);
  }
  if (kind == "aten::argmax" || kind == "aten::argmin" ||
      ((kind == "aten::max" || kind == "aten::min") && optionalInput(node, "dim"))) {
    // argmax/argmin, and max/min along a dim, which give the values and their positions.
    bool greatest = kind == "aten::argmax" || kind == "aten::max";
    Item x = materialized(tensorOf(operand(0), "the operand"), baseName(node->input(0)));
    if (x.dtype == DType::Bool) x = castTo(DType::I64, x);
    const Item* dimItem = optionalInput(node, "dim");
    const Item* keepItem = optionalInput(node, "keepdim");
    bool keepdim = keepItem && boolOf(*keepItem, "keepdim");
    if (!dimItem || dimItem->kind == Item::Kind::None) {  // over every element, in row-major order
      if (keepdim && x.rank() > 0) fail(fmt::format("{} of every dim with keepdim is not supported", kind));
      CodePtr flat = x.rank() == 1 ? x.code : callCode("reshape", {x.code, listCode({numberCode(-1, true)})});
      if (x.rank() == 0) return define(out, Item::tensor(DType::I64, {}, numberCode(0, true)));
      return define(out, Item::tensor(DType::I64, {}, callCode(kind.substr(6), {flat}, {{"axis", numberCode(0, true)}})), true);
    }
    if (x.rank() == 0) fail(fmt::format("{} along a dim of a rank-0 tensor is not supported", kind));
    int dim = axis(intOf(*dimItem, "the reduced dim"), x.rank());
    Shape shape;
    for (int d = 0; d < x.rank(); ++d)
      if (d != dim) shape.push_back(x.shape[d]);
      else if (keepdim) shape.push_back(Dim::constant(1));
    std::vector<std::pair<std::string, CodePtr>> keywords = {{"axis", numberCode(dim, true)}};
    if (keepdim) keywords.push_back({"keepdim", nameCode("true")});
    Item positions = Item::tensor(DType::I64, shape, callCode(greatest ? "argmax" : "argmin", {x.code}, keywords));
    if (kind == "aten::argmax" || kind == "aten::argmin") return define(out, positions, true);
    define(node->output(0), Item::tensor(x.dtype, shape, callCode(greatest ? "max" : "min", {x.code}, keywords)), true);
    define(node->output(1), positions, true);
    return;
  }
  if ((kind == "aten::max" || kind == "aten::min") && optionalInput(node, "other")) {
    Item a = tensorOf(operand(0), "the operand"), b = tensorOf(operand(1), "the operand");
    DType type = arithmeticType(a, b);
    return define(out, Item::tensor(type, broadcast(a.shape, b.shape),
                                    callCode(kind.substr(6), {operandCode(a, type), operandCode(b, type)})));
  }
  if (kind == "aten::max" || kind == "aten::min") return define(out, reduce(kind.substr(6), operand(0), nullptr, false, std::nullopt), true);
  if (kind == "aten::norm" || kind == "aten::frobenius_norm" || kind == "aten::linalg_vector_norm") {
    const Item* order = kind == "aten::frobenius_norm" ? nullptr : optionalInput(node, kind == "aten::norm" ? "p" : "ord");
    const Item* dims = optionalInput(node, "dim");
    const Item* keepItem = optionalInput(node, "keepdim");
    if (dims && dims->kind == Item::Kind::List && dims->elements.empty()) dims = nullptr;
    return define(out, norm(tensorOf(operand(0), "the operand"), order && order->kind != Item::Kind::None ? numberOf(*order, "the norm's order") : 2,
                            dims, keepItem && boolOf(*keepItem, "keepdim")), true);
  }
  if (kind == "aten::pairwise_distance") return define(out, pairwiseDistance(node, operand(0), operand(1)), true);
  if (kind == "aten::cosine_similarity") {
    // x1 . x2 / max(|x1| |x2|, eps) along dim, as ATen computes it.
    Item a = materialized(tensorOf(operand(0), "the operand"), baseName(node->input(0)));
    Item b = materialized(tensorOf(operand(1), "the operand"), baseName(node->input(1)));
    Item dims = Item::of(Item::Kind::List);
    dims.elements.push_back(input(node, "dim"));
    double eps = numberOf(input(node, "eps"), "eps");
    Item dot = reduce("sum", elementwise("*", a, b), &dims, false, std::nullopt);
    Item product = elementwise("*", reduce("sum", elementwise("*", a, a), &dims, false, std::nullopt),
                               reduce("sum", elementwise("*", b, b), &dims, false, std::nullopt));
    return define(out, elementwise("/", dot, function("sqrt", pairwise("max", product, Item::ofNumber(eps * eps, false)), true)), true);
  }
  if (kind == "aten::einsum") return define(out, einsum(node), true);
  if (kind == "aten::any" || kind == "aten::all") {
    // any: some element is non-zero; all: none is zero. Counted, so that nothing gives False and True.
    const Item& x = tensorOf(operand(0), "the operand");
    bool any = kind == "aten::any";
    Item hits = x.dtype == DType::Bool ? (any ? x : Item::tensor(DType::Bool, x.shape, unaryCode("not", x.code)))
                                       : elementwise(any ? "!=" : "==", x, Item::ofNumber(0, true));
    const Item* keep = optionalInput(node, "keepdim");
    Item count = reduce("sum", hits, optionalInput(node, "dim"), keep && boolOf(*keep, "keepdim"), std::nullopt);
    return define(out, elementwise(any ? ">" : "==", count, Item::ofNumber(0, true)), true);
  }
  if (kind == "aten::cumsum" || kind == "aten::cumprod") {
    Item x = tensorOf(operand(0), "the operand");
    if (std::optional<DType> dtype = dtypeArgument(optionalInput(node, "dtype"))) x = castTo(*dtype, x);
    else if (!isFloat(x.dtype)) x = castTo(DType::I64, x);  // PyTorch scans integers in i64
    if (x.rank() == 0) return define(out, x);
    int dim = axis(intOf(input(node, "dim"), "the scanned dim"), x.rank());
    return define(out, Item::tensor(x.dtype, x.shape, callCode(kind.substr(6), {x.code}, {{"axis", numberCode(dim, true)}})), true);
  }
  if (kind == "aten::logsumexp") {
    Item x = tensorOf(operand(0), "the operand");
    if (!isFloat(x.dtype)) x = castTo(DType::F32, x);
    bool keepdim = boolOf(input(node, "keepdim"), "keepdim");
    std::vector<int64_t> dims = intsOf(input(node, "dim"), "logsumexp's dims");
    if (x.rank() == 0 || dims.empty()) fail("logsumexp needs a tensor of rank 1 or more and the dims to reduce");
    std::vector<CodePtr> listed;
    Shape shape;
    std::set<int> reduced;
    for (int64_t dim : dims) reduced.insert(axis(dim, x.rank())), listed.push_back(numberCode(static_cast<double>(dim), true));
    for (int d = 0; d < x.rank(); ++d)
      if (!reduced.count(d)) shape.push_back(x.shape[d]);
      else if (keepdim) shape.push_back(Dim::constant(1));
    std::vector<std::pair<std::string, CodePtr>> keywords = {{"axis", listed.size() == 1 ? listed[0] : listCode(listed)}};
    if (keepdim) keywords.push_back({"keepdim", nameCode("true")});
    return define(out, Item::tensor(x.dtype, shape, callCode("logsumexp", {x.code}, keywords)), true);
  }
  if (kind == "aten::_scaled_dot_product_attention" || kind == "aten::scaled_dot_product_attention")
    return define(out, attention(node), true);
  fail(fmt::format("unsupported operation {}", kind));
}

void Translator::declareOutputs() {
  const Value* returned = model_.graph->outputs()[0];
  if (poisoned_.count(returned)) return;
  const Item& result = item(returned);
  std::vector<Item> values = result.kind == Item::Kind::List ? result.elements : std::vector<Item>{result};
  for (size_t k = 0; k < values.size(); ++k) {
    std::string name = values.size() == 1 ? "out" : fmt::format("out{}", k);
    const Item& value = values[k];
    const Node* place = model_.graph->return_node();
    if (value.kind != Item::Kind::Tensor || value.wrapped) {
      report(place, fmt::format("forward returns a {} as {}; only tensors can be outputs", value.kind == Item::Kind::List ? "list" : "number", name));
      continue;
    }
    Declaration declaration{name, value.dtype, sizes_.resolve(value.shape)};
    if (value.code->kind != Code::Kind::Name || value.code->text != name) program_.statements.push_back({name, {}, value.code, {}});
    program_.outputs.push_back(declaration);
  }
}

std::optional<std::string> Translator::run() {
  program_.origin = fs::path(model_.path).filename().string();
  program_.kernel = options_.kernelName;
  // Forward's arguments keep their names. The outputs are named out or out0, out1, ... (`_1` after an
  // argument of that name), before the parameters and sizes, which give way to them; a value returned twice
  // is written once, under its first name.
  for (const std::string& name : model_.argumentNames) taken_.insert(name);
  const Value* returned = model_.graph->outputs()[0];
  const Node* producer = returned->node();
  std::vector<const Value*> outputValues;
  if (producer->kind() == c10::prim::TupleConstruct) outputValues.assign(producer->inputs().begin(), producer->inputs().end());
  else outputValues.push_back(returned);
  for (size_t k = 0; k < outputValues.size(); ++k)
    outputNames_[outputValues[k]].push_back(claim(outputValues.size() == 1 ? "out" : fmt::format("out{}", k)));
  declareInputs();
  translateBlock(model_.graph->block());
  declareOutputs();
  if (diagnostics_.hasErrors()) return std::nullopt;
  for (const std::string& name : tensorAttributeOrder_)
    if (auto used = usedParameters_.find(name); used != usedParameters_.end()) program_.inputs.push_back(used->second);
  return printProgram(program_, sizes_);
}

}  // namespace

InputSpec parseInputSpec(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return UsageError(fmt::format("--input '{}': {} (expected NAME=DTYPE[d0,d1,...], e.g. x=f32[B,64])", text, why));
  };
  size_t equals = text.find('=');
  if (equals == std::string::npos || equals == 0) throw bad("no NAME=");
  InputSpec spec;
  spec.name = text.substr(0, equals);
  if (!isIdentifier(spec.name)) throw bad(fmt::format("'{}' is not a name", spec.name));
  std::string rest = text.substr(equals + 1);
  size_t open = rest.find('[');
  if (open == std::string::npos || rest.back() != ']') throw bad("no [dims]");
  std::optional<DType> dtype = parseDType(rest.substr(0, open));
  if (!dtype) throw bad(fmt::format("'{}' is not a dtype (f16 bf16 f32 f64 i8 i32 i64 bool)", rest.substr(0, open)));
  spec.dtype = *dtype;
  std::string dims = rest.substr(open + 1, rest.size() - open - 2);
  if (dims.find_first_not_of(" ") == std::string::npos) return spec;
  for (size_t start = 0, comma; start <= dims.size(); start = comma + 1) {
    comma = dims.find(',', start);
    if (comma == std::string::npos) comma = dims.size();
    std::string dim = dims.substr(start, comma - start);
    dim.erase(0, dim.find_first_not_of(' '));
    dim.erase(dim.find_last_not_of(' ') + 1);
    if (dim == "?") dim.clear();
    bool number = !dim.empty() && std::all_of(dim.begin(), dim.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (number && (dim.size() > 15 || std::stoll(dim) < 1)) throw bad(fmt::format("the dim {} is not a positive size", dim));
    if (!dim.empty() && !number && (!isIdentifier(dim) || isReservedName(dim))) throw bad(fmt::format("'{}' is neither a number nor a size name", dim));
    spec.dims.push_back(dim);
  }
  return spec;
}

LoadedModelPtr loadModel(const std::string& path, Diagnostics& diagnostics) {
  std::error_code ignored;
  if (!fs::is_regular_file(path, ignored)) {
    diagnostics.error("cannot read the file");
    return nullptr;
  }
  LoadedModelPtr model(new LoadedModel);
  model->path = path;
  try {
    torch::jit::Module module = torch::jit::load(path);
    module.eval();
    if (!module.find_method("forward")) {
      diagnostics.error("the TorchScript module has no forward method");
      return nullptr;
    }
    // Buffers stay attributes like the parameters, so that both become inputs.
    std::vector<std::string> buffers;
    for (const auto& buffer : module.named_buffers(true)) buffers.push_back(buffer.name);
    model->module = torch::jit::freeze_module(module, buffers, /*freezeInterfaces=*/true, /*preserveParameters=*/true);
    torch::jit::Method forward = model->module.get_method("forward");
    model->graph = forward.graph()->copy();
    const c10::FunctionSchema& schema = forward.function().getSchema();
    for (size_t k = 1; k < schema.arguments().size(); ++k) model->argumentNames.push_back(schema.arguments()[k].name());
  } catch (const c10::Error& error) {
    diagnostics.error(fmt::format("not a TorchScript model that LibTorch can load: {}", firstLine(error.what_without_backtrace())));
    return nullptr;
  } catch (const std::exception& error) {
    diagnostics.error(fmt::format("not a TorchScript model that LibTorch can load: {}", firstLine(error.what())));
    return nullptr;
  }
  // Calls inlined; then constants folded, which removes the `prim::If`/`aten::warn` scaffolding of
  // functions such as F.log_softmax, and what no output needs dropped.
  std::shared_ptr<torch::jit::Graph>& graph = model->graph;
  torch::jit::Inline(*graph);
  torch::jit::RemoveListMutation(graph);
  for (int round = 0; round < 2; ++round) {
    torch::jit::ConstantPropagation(graph);
    torch::jit::EliminateDeadCode(graph);
    torch::jit::LowerSimpleTuples(graph);
  }
  return model;
}

size_t graphNodeCount(const LoadedModel& model) {
  size_t count = 0;
  for ([[maybe_unused]] const Node* node : model.graph->nodes()) ++count;
  return count;
}

std::optional<std::string> translateModel(const LoadedModel& model, const ImportOptions& options, Diagnostics& diagnostics) {
  if (!isIdentifier(options.kernelName) || isReservedName(options.kernelName))
    throw UsageError(fmt::format("--name {}: not a name a kernel can have", options.kernelName));
  std::optional<std::string> source;
  try {
    source = Translator(model, options, diagnostics).run();
  } catch (const c10::Error& error) {
    throw InternalError(fmt::format("LibTorch failed while the graph was walked: {}", firstLine(error.what_without_backtrace())));
  }
  if (!source) return std::nullopt;
  // What the importer prints must be a program the frontend accepts; one it rejects is a bug here.
  Diagnostics check;
  Frontend frontend(check, {Frontend::defaultStdlibDir()});
  std::string displayPath = fs::path(model.path).replace_extension(".emmy").string();
  if (const ast::Module* module = frontend.loadText(displayPath, *source, fs::path(model.path).parent_path()))
    frontend.elaborateAll(*module);
  if (check.hasErrors())
    throw InternalError(fmt::format("the imported source does not compile:\n{}\n{}", check.render(), *source));
  return source;
}

}  // namespace emmy::importer
