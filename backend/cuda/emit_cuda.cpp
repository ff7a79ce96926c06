// Kernel IR -> CUDA text: NAME.cu (kernels, host functions) and NAME.h (their declarations), in the
// shape /backend/ARCHITECTURE.md describes. Printing only: every decision was made in the IR levels.
//
// Arithmetic follows the language: f16 and bf16 values are computed in float and rounded after each
// operation (as the reference evaluator does); integer division and remainder by zero give 0; float
// min and max propagate NaN; float-to-integer conversion truncates, saturates and maps NaN to 0.
#include "backend/cuda/emit_cuda.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "ir/kernel/index_widths.h"
#include "ir/tensor/build.h"
#include "ir/tensor/printer.h"
#include "support/cpp_names.h"
#include "support/diagnostics.h"
#include "support/text.h"

namespace emmy::cuda {

using namespace tensor;

const char* cudaTypeName(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::I8: return "int8_t";
    case DType::I32: return "int32_t";
    case DType::I64: return "int64_t";
    case DType::F16: return "__half";
    case DType::BF16: return "__nv_bfloat16";
    case DType::F32: return "float";
    case DType::F64: return "double";
  }
  return "?";
}

namespace {

// The shared memory every device gives a block without opting in (static and sized at launch together).
constexpr int64_t kSharedBytesWithoutOptIn = 48 * 1024;
// The template parameter of the body a kernel shares with its 64-bit twin (no user name starts with
// `emmy_` in generated code: spelled() renames it).
constexpr const char* kIndexTypeParameter = "emmy_index_t";
// The name of that body: the kernel's name and this.
constexpr const char* kSharedBodySuffix = "__body";
std::string indexTypeOf(const kernel::Function& function) { return function.indexBits == 32 ? "int32_t" : "int64_t"; }

bool isHalf(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }

// f16/bf16 values are computed in float: the text of `text` (of type `dtype`) as a float, and back.
std::string widen(DType dtype, const std::string& text) { return isHalf(dtype) ? "emmy_f32(" + text + ")" : text; }
std::string narrow(DType dtype, const std::string& text) {
  if (dtype == DType::F16) return "emmy_f16(" + text + ")";
  if (dtype == DType::BF16) return "emmy_bf16(" + text + ")";
  return text;
}

// The type arithmetic on `dtype` runs in.
DType computeType(DType dtype) { return isHalf(dtype) ? DType::F32 : dtype; }

std::string floatLiteral(DType dtype, double value) {
  bool single = dtype != DType::F64;
  if (std::isnan(value)) return single ? "NAN" : "(double)NAN";
  if (std::isinf(value)) return std::string(value < 0 ? "-" : "") + (single ? "INFINITY" : "(double)INFINITY");
  std::string text = single ? fmt::format("{}", static_cast<float>(value)) : fmt::format("{}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return single ? text + "f" : text;
}

std::string integerLiteral(DType dtype, int64_t value) {
  // Typed, so that the helpers' template arguments agree (LL would be long long, not int64_t).
  if (dtype == DType::I64) return value == INT64_MIN ? "(int64_t)(-9223372036854775807LL - 1)" : fmt::format("(int64_t){}", value);
  if (dtype == DType::I32 && value == INT32_MIN) return "(-2147483647 - 1)";
  if (dtype == DType::I8) return fmt::format("(int8_t){}", value);
  return fmt::format("{}", value);
}

const char* floatFunction(UnaryOp op) {
  switch (op) {
    case UnaryOp::Exp: return "exp";
    case UnaryOp::Exp2: return "exp2";
    case UnaryOp::Log: return "log";
    case UnaryOp::Log2: return "log2";
    case UnaryOp::Sqrt: return "sqrt";
    case UnaryOp::Rsqrt: return "rsqrt";
    case UnaryOp::Abs: return "fabs";
    case UnaryOp::Sin: return "sin";
    case UnaryOp::Cos: return "cos";
    case UnaryOp::Tanh: return "tanh";
    case UnaryOp::Erf: return "erf";
    case UnaryOp::Floor: return "floor";
    case UnaryOp::Ceil: return "ceil";
    default: return nullptr;
  }
}

// Whether `op` on integers of `dtype` can overflow, and so must wrap through the prelude's helpers
// (signed overflow is undefined in C++, and the CUDA compiler optimizes on that).
bool wrapsOnOverflow(DType dtype, BinaryOp op) {
  return isInteger(dtype) && (op == BinaryOp::Add || op == BinaryOp::Sub || op == BinaryOp::Mul);
}

// Whether binaryText writes `op` as a call of one of the prelude's helpers (emmy_min, emmy_add, ...).
bool callsHelper(BinaryOp op, DType operands, bool wrapping) {
  if (wrapping && wrapsOnOverflow(operands, op)) return true;
  switch (op) {
    case BinaryOp::Min:
    case BinaryOp::Max: return true;
    case BinaryOp::Div:
    case BinaryOp::Mod:
    case BinaryOp::Pow: return !isFloat(operands);
    default: return false;
  }
}

// `a OP b` for operands already in `dtype`'s compute type; `wrapping`: integer +, - and * of user values
// wrap on overflow (index arithmetic, which stays in range, is plain C++).
std::string binaryText(BinaryOp op, DType operands, const std::string& a, const std::string& b, bool wrapping) {
  bool floating = isFloat(operands);
  std::string f = operands == DType::F64 ? "" : "f";
  if (wrapping && wrapsOnOverflow(operands, op))
    return fmt::format("emmy_{}({}, {})", op == BinaryOp::Add ? "add" : op == BinaryOp::Sub ? "sub" : "mul", a, b);
  switch (op) {
    case BinaryOp::Add: return fmt::format("({} + {})", a, b);
    case BinaryOp::Sub: return fmt::format("({} - {})", a, b);
    case BinaryOp::Mul: return fmt::format("({} * {})", a, b);
    case BinaryOp::Div: return floating ? fmt::format("({} / {})", a, b) : fmt::format("emmy_div({}, {})", a, b);
    case BinaryOp::Mod: return floating ? fmt::format("fmod{}({}, {})", f, a, b) : fmt::format("emmy_mod({}, {})", a, b);
    case BinaryOp::Min: return fmt::format("emmy_min({}, {})", a, b);
    case BinaryOp::Max: return fmt::format("emmy_max({}, {})", a, b);
    case BinaryOp::Pow: return floating ? fmt::format("pow{}({}, {})", f, a, b) : fmt::format("emmy_ipow({}, {})", a, b);
    case BinaryOp::Lt: return fmt::format("({} < {})", a, b);
    case BinaryOp::Le: return fmt::format("({} <= {})", a, b);
    case BinaryOp::Gt: return fmt::format("({} > {})", a, b);
    case BinaryOp::Ge: return fmt::format("({} >= {})", a, b);
    case BinaryOp::Eq: return fmt::format("({} == {})", a, b);
    case BinaryOp::Ne: return fmt::format("({} != {})", a, b);
    case BinaryOp::And: return fmt::format("({} && {})", a, b);
    case BinaryOp::Or: return fmt::format("({} || {})", a, b);
  }
  return "?";
}

// A value of type `from` converted to `to`.
std::string castText(DType from, DType to, const std::string& text) {
  if (from == to) return text;
  std::string wide = widen(from, text);
  DType source = computeType(from);
  if (to == DType::Bool) return fmt::format("({} != 0)", wide);
  if (isFloat(to)) return narrow(to, fmt::format("({}){}", cudaTypeName(computeType(to)), wide));
  if (isFloat(source)) return fmt::format("({})emmy_truncate((double){})", cudaTypeName(to), wide);
  return fmt::format("({}){}", cudaTypeName(to), wide);
}

// A user's name as generated code spells it: as written, unless C++, CUDA or the headers give it a
// meaning (then NAME__, which no user name and no name of the compiler's own can be: those have '__'
// followed by more).
std::string spelled(const std::string& name) { return isReservedInGeneratedCode(name) ? name + "__" : name; }

class Emitter {
public:
  explicit Emitter(const kernel::Program& program) : program_(program) {}

  std::string expr(const Expr& e) const {
    return dispatch(e, [&](const auto& node) { return exprNode(node); });
  }
  // A user value (what a store writes): its integer arithmetic wraps, as the language says; the
  // subscripts of its reads are index arithmetic again.
  std::string value(const Expr& e) const { return inContext(true, e); }
  std::string index(const Expr& e) const { return inContext(false, e); }

  // Kernels, then the host function.
  std::string emit() {
    std::string out;
    for (const kernel::Function& function : program_.functions) out += kernelFunction(function);
    // EMMY_HOST_ONLY compiles the host function alone, as host C++: the GPU runtime (runtime/) launches
    // the kernels by name from NVRTC's output of this same text.
    return "#ifndef EMMY_HOST_ONLY\n" + out + "#endif  // EMMY_HOST_ONLY\n#ifndef __CUDACC_RTC__\n" + hostFunction() +
           "#endif  // __CUDACC_RTC__\n";
  }

  std::string declaration() const { return hostSignature() + ";\n"; }
  // Whether the kernels copy to shared memory asynchronously (and need kAsyncCopyPrelude).
  bool copiesAsynchronously() const { return copiesAsynchronously_; }
  bool usesTensorCores() const { return usesTensorCores_; }
  bool transposesQuads() const { return transposesQuads_; }
  // Whether the host function computes a derived size by a floor division (and needs kFloorDividePrelude).
  bool dividesSizes() const {
    return std::any_of(program_.source.derivedSizes.begin(), program_.source.derivedSizes.end(),
                       [](const DerivedSize& size) {
                         return size.kind == DerivedSize::Kind::Quotient && !(size.denominator == SizePolynomial::constant(1));
                       });
  }
  bool sizesSharedAtLaunch() const {
    return std::any_of(program_.functions.begin(), program_.functions.end(),
                       [](const kernel::Function& function) { return function.launchSharedBytes() != nullptr; });
  }

private:
  // ---- expressions ----
  // In a kernel with 32-bit indices, index arithmetic is of the narrow type and its constants plain
  // ints; a user value or a size expression of the host function stays int64_t. The narrow type is
  // int32_t, or, in the body a kernel shares with its 64-bit twin, the body's template parameter.
  bool narrowIndex(const Expr& e) const { return indices_ && indices_->isIndex(e); }
  const char* narrowType() const { return sharedWithTwin_ ? kIndexTypeParameter : "int32_t"; }
  const char* indexType() const { return indices_ ? narrowType() : "int64_t"; }
  // `e`, an operand of an operation on 64-bit integers (`wide`) or not.
  std::string indexOperand(const Expr& e, bool wide) const {
    return wide && narrowIndex(e) ? "(int64_t)" + expr(e) : expr(e);
  }
  std::string exprNode(const IntImm& node) const {
    return narrowIndex(node) ? std::to_string(node.value) : integerLiteral(node.dtype, node.value);
  }
  std::string typedConstant(const Expr& e, const std::string& text) const {
    return narrowIndex(e) && e.as<IntImm>() ? fmt::format("({}){}", narrowType(), text) : text;
  }
  std::string exprNode(const FloatImm& node) const {
    return narrow(node.dtype, floatLiteral(computeType(node.dtype), node.value));
  }
  std::string exprNode(const BoolImm& node) const { return node.value ? "true" : "false"; }
  std::string exprNode(const AxisVar& node) const {
    if (kernel::isLaunchSharedBytes(node.name)) return fmt::format("({})emmy_launch_shared_bytes()", indexType());
    if (kernel::isIndexLimit(node.name)) return "EMMY_INDEX_LIMIT";
    return kernel::isHardwareIndex(node.name) ? fmt::format("({}){}", indexType(), node.name) : variable(node.name);
  }
  std::string exprNode(const SizeVar& node) const { return sizeName(node.name); }
  // A size's C name: a derived one (named by its definition) is `size__K`, K its place among them.
  std::string sizeName(const std::string& name) const {
    const std::vector<DerivedSize>& derived = program_.source.derivedSizes;
    for (size_t k = 0; k < derived.size(); ++k)
      if (derived[k].name == name) return fmt::format("size__{}", k);
    return spelled(name);
  }
  std::string exprNode(const ScalarParam& node) const { return spelled(node.name); }
  std::string exprNode(const Load& node) const {
    EMMY_INTERNAL_ASSERT(!node.padValue, "a padded load reached the CUDA printer");
    if (node.indices.empty()) return spelled(node.tensor);
    return fmt::format("{}[{}]", spelled(node.tensor), index(*node.indices[0]));
  }
  std::string exprNode(const Unary& node) const {
    DType type = node.dtype;
    std::string operand = widen(type, indexOperand(*node.operand, type == DType::I64 && !narrowIndex(node)));
    std::string f = computeType(type) == DType::F64 ? "" : "f";
    std::string result;
    if (node.op == UnaryOp::Not) return "(!" + operand + ")";
    if (node.op == UnaryOp::Neg) {
      result = wrapping_ && isInteger(type) ? "emmy_neg(" + operand + ")" : "(-" + operand + ")";
      if (type == DType::I8 && !wrapping_) result = "(int8_t)" + result;
    } else if (!isFloat(type)) {
      // Integer abs and relu wrap like the evaluator; floor and ceil are the identity.
      switch (node.op) {
        case UnaryOp::Abs: result = "emmy_abs(" + operand + ")"; break;
        case UnaryOp::Relu: result = "emmy_relu(" + operand + ")"; break;
        default: result = operand; break;
      }
    } else if (node.approximate && (node.op == UnaryOp::Exp || node.op == UnaryOp::Exp2)) {
      result = fmt::format("emmy_{}_approximate({})", node.op == UnaryOp::Exp ? "exp" : "exp2", operand);
    } else if (const char* function = floatFunction(node.op)) {
      result = fmt::format("{}{}({})", function, f, operand);
    } else {
      const char* helper = node.op == UnaryOp::Sigmoid ? "emmy_sigmoid"
                           : node.op == UnaryOp::Gelu  ? "emmy_gelu"
                           : node.op == UnaryOp::Silu  ? "emmy_silu"
                                                       : "emmy_relu";
      result = fmt::format("{}({})", helper, operand);
    }
    return narrow(type, result);
  }
  std::string exprNode(const Binary& node) const {
    DType operands = node.lhs->dtype;
    bool wide = operands == DType::I64 && !(narrowIndex(*node.lhs) && narrowIndex(*node.rhs) &&
                                            (node.dtype != DType::I64 || narrowIndex(node)));
    std::string lhs = indexOperand(*node.lhs, wide), rhs = indexOperand(*node.rhs, wide);
    // C's / and % already truncate like the language's; only a divisor of 0 or -1 needs the helper. In
    // index arithmetic (a flat index split into coordinates) the divisor is a product of extents of the
    // loop being run, so positive: the helper's tests there, in every unrolled lane, cost NVRTC tens of
    // seconds on a 4-D elementwise kernel.
    if ((node.op == BinaryOp::Div || node.op == BinaryOp::Mod) && isInteger(operands)) {
      const auto* divisor = node.rhs->as<IntImm>();
      if (divisor ? divisor->value != 0 && divisor->value != -1 : !wrapping_) {
        std::string text = fmt::format("({} {} {})", lhs, node.op == BinaryOp::Div ? "/" : "%", rhs);
        // C promotes i8 operands to int; the result is an i8 again (so that emmy_max(i8, i8) resolves).
        return node.dtype == DType::I8 ? "(int8_t)" + text : text;
      }
    }
    // A helper's overloads and template argument need operands of one type: in a body over the index
    // type, a narrow constant there is of that type too (emmy_min(i, 4) has an int64_t and an int).
    if (sharedWithTwin_ && !wide && callsHelper(node.op, computeType(operands), wrapping_)) {
      lhs = typedConstant(*node.lhs, lhs);
      rhs = typedConstant(*node.rhs, rhs);
    }
    std::string text = binaryText(node.op, computeType(operands), widen(operands, lhs), widen(operands, rhs), wrapping_);
    if (isComparison(node.op) || node.op == BinaryOp::And || node.op == BinaryOp::Or) return text;
    if (node.dtype == DType::I8 && !(wrapping_ && wrapsOnOverflow(operands, node.op))) return "(int8_t)" + text;
    return narrow(node.dtype, text);
  }
  std::string exprNode(const Select& node) const {
    bool wide = node.dtype == DType::I64 && !narrowIndex(node);
    return fmt::format("({} ? {} : {})", expr(*node.condition), indexOperand(*node.ifTrue, wide),
                       indexOperand(*node.ifFalse, wide));
  }
  std::string exprNode(const Cast& node) const {
    return castText(node.operand->dtype, node.dtype, expr(*node.operand));
  }

  // ---- names ----
  // Loop and let variables share C++ scopes with the function's buffers, parameters and sizes, which Kernel
  // IR keeps apart by kind (a default loop named `element` beside a scalar `element`): a variable named
  // like one of those is spelled NAME__var.
  std::string variable(const std::string& name) const { return buffers_.count(name) ? name + "__var" : spelled(name); }
  // The names the function's buffers, scalars and sizes take: its parameters and the buffers it declares.
  void collectBuffers(const std::vector<std::string>& parameters, const kernel::Stmt* body) {
    buffers_ = std::set<std::string>(parameters.begin(), parameters.end());
    if (body) collectDeclared(*body);
  }
  void collectDeclared(const kernel::Stmt& s) {
    kernel::dispatch(s, [&](const auto& node) {
      using Node = std::decay_t<decltype(node)>;
      if constexpr (std::is_same_v<Node, kernel::Declare>) buffers_.insert(node.buffer);
      if constexpr (requires { node.body; }) collectDeclared(*node.body);
      if constexpr (std::is_same_v<Node, kernel::Block>)
        for (const kernel::StmtPtr& inner : node.stmts) collectDeclared(*inner);
      if constexpr (std::is_same_v<Node, kernel::IfAligned>) {
        collectDeclared(*node.aligned);
        collectDeclared(*node.otherwise);
      }
    });
  }

  // ---- statements ----
  // A loop's or let's variable, just defined: 32 bits where it is index arithmetic in a kernel that has them.
  const char* variableType(const std::string& var) const { return narrowIndex(AxisVar(var)) ? narrowType() : "int64_t"; }
  void line(int indent, const std::string& text) { body_ += std::string(2 * indent, ' ') + text + "\n"; }

  void stmt(const kernel::Stmt& s, int indent) {
    kernel::dispatch(s, [&](const auto& node) { stmtNode(node, indent); });
  }
  void stmtNode(const kernel::For& node, int indent) {
    if (node.unroll) line(indent, "#pragma unroll");
    if (node.rolled) line(indent, "#pragma unroll 1");
    std::string var = variable(node.var);
    std::string begin = expr(*node.begin), end = expr(*node.end), step = expr(*node.step);
    if (indices_) indices_->openScope(), indices_->define(node);
    line(indent, fmt::format("for ({} {} = {}; {} < {}; {} += {}) {{", variableType(node.var), var, begin, var, end, var, step));
    scoped(*node.body, indent + 1);
    if (indices_) indices_->closeScope();
    line(indent, "}");
  }
  void stmtNode(const kernel::Let& node, int indent) {
    scopes_.back().insert(node.var);
    std::string value = expr(*node.value);
    if (indices_) indices_->define(node);
    line(indent, fmt::format("const {} {} = {};", variableType(node.var), variable(node.var), value));
  }
  void stmtNode(const kernel::Declare& node, int indent) {
    scopes_.back().insert(node.buffer);
    if (node.memory == kernel::Memory::Shared) {
      sharedBuffers_.insert(node.buffer);
      if (node.sizedAtLaunch)
        line(indent, fmt::format("EMMY_SHARED_SIZED_AT_LAUNCH({}, {}, {}, {}, {});", cudaTypeName(node.dtype),
                                 spelled(node.buffer), node.count, expr(*launchSharedOffsets_.at(&node)),
                                 expr(*node.sizedAtLaunch)));
      else
        line(indent, fmt::format("EMMY_SHARED({}, {}, {});", cudaTypeName(node.dtype), spelled(node.buffer), node.count));
      return;
    }
    bool scalar = node.count == 1;
    // Local arrays are aligned for the 16-byte copies of vectorized loops.
    line(indent, fmt::format("{}{} {}{};", scalar ? "" : "alignas(16) ", cudaTypeName(node.dtype), spelled(node.buffer),
                             scalar ? "" : fmt::format("[{}]", node.count)));
  }
  void stmtNode(const kernel::Store& node, int indent) {
    if (node.atomic) return atomicStore(node, indent);
    line(indent, fmt::format("{}{} = {};", spelled(node.buffer), node.index ? "[" + expr(*node.index) + "]" : "",
                             value(*node.value)));
  }
  // CUDA's atomics take int, unsigned long long (a 64-bit sum wraps the same), long long, float and double.
  void atomicStore(const kernel::Store& node, int indent) {
    DType dtype = node.value->dtype;
    bool sum = *node.atomic == tensor::ReduceOp::Sum;
    std::string function = sum ? "atomicAdd" : *node.atomic == tensor::ReduceOp::Max ? "atomicMax" : "atomicMin";
    std::string type = dtype == DType::I64 ? (sum ? "unsigned long long" : "long long") : cudaTypeName(dtype);
    std::string address = fmt::format("&{}[{}]", spelled(node.buffer), expr(*node.index));
    if (dtype == DType::I64) address = fmt::format("reinterpret_cast<{}*>({})", type, address);
    line(indent, fmt::format("{}({}, ({})({}));", function, address, type, value(*node.value)));
  }
  void stmtNode(const kernel::If& node, int indent) {
    line(indent, fmt::format("if ({}) {{", expr(*node.condition)));
    scoped(*node.body, indent + 1);
    line(indent, "}");
  }
  void stmtNode(const kernel::Barrier&, int indent) { line(indent, "__syncthreads();"); }
  void stmtNode(const kernel::ShuffleCombine& node, int indent) {
    // Shuffles move 32- or 64-bit values; narrower types travel as int.
    bool direct = node.dtype == DType::F32 || node.dtype == DType::F64 || node.dtype == DType::I32 ||
                  node.dtype == DType::I64;
    std::string buffer = spelled(node.buffer);
    std::string sent = direct ? buffer : "(int)" + buffer;
    std::string received = fmt::format("__shfl_xor_sync(0xffffffffu, {}, {})", sent, node.laneMask);
    if (!direct) received = fmt::format("({}){}", cudaTypeName(node.dtype), received);
    line(indent, fmt::format("{} = {};", buffer,
                             narrow(node.dtype, binaryText(node.op, computeType(node.dtype), widen(node.dtype, buffer),
                                                           widen(node.dtype, received), true))));
  }
  void stmtNode(const kernel::CopyAsync& node, int indent) {
    copiesAsynchronously_ = true;
    if (node.lanes > 1) {
      line(indent, fmt::format("emmy_copy_async_lanes<{}>({}, {}, {}, {}, {} ? {} : ({})0);", node.lanes,
                               spelled(node.buffer), expr(*node.index), spelled(node.source), expr(*node.sourceIndex),
                               expr(*node.condition), expr(*node.lanesInside),
                               narrowIndex(*node.lanesInside) ? narrowType() : "int64_t"));
      return;
    }
    line(indent, fmt::format("emmy_copy_async({}, {}, {}, {}, {});", spelled(node.buffer), expr(*node.index), spelled(node.source),
                             expr(*node.sourceIndex), expr(*node.condition)));
  }
  void stmtNode(const kernel::WaitForCopies& node, int indent) {
    line(indent, fmt::format("emmy_wait_for_copies<{}>();", node.pending));
  }
  void stmtNode(const kernel::LoadMatrix& node, int indent) {
    usesTensorCores_ = true;
    line(indent, fmt::format("emmy_ldmatrix<{}, {}>((uint32_t*)&{}[{}], {}, {});", node.count, node.transpose ? "true" : "false",
                             spelled(node.fragment), expr(*node.fragmentElement), spelled(node.buffer), expr(*node.element)));
  }
  void stmtNode(const kernel::MultiplyAccumulate& node, int indent) {
    usesTensorCores_ = true;
    line(indent, fmt::format("emmy_mma_m16n8k16<{}>(&{}[{}], (const uint32_t*)&{}[{}], (const uint32_t*)&{}[{}]);",
                             cudaTypeName(node.dtype), spelled(node.accumulator), expr(*node.accumulatorElement),
                             spelled(node.a), expr(*node.aElement), spelled(node.b), expr(*node.bElement)));
  }
  void stmtNode(const kernel::TransposeQuad& node, int indent) {
    transposesQuads_ = true;
    line(indent, fmt::format("emmy_transpose_quad((uint32_t*){}, {});", spelled(node.local), expr(*node.lane)));
  }
  std::string localAddress(const std::string& local, const ExprPtr& element) const {
    return element ? fmt::format("&{}[{}]", spelled(local), expr(*element)) : spelled(local);
  }
  void stmtNode(const kernel::CombineLanes& node, int indent) {
    std::string accumulator = spelled(node.accumulator) + (node.element ? "[" + expr(*node.element) + "]" : "");
    const char* op = node.op == BinaryOp::Max ? "max" : "min";
    line(indent, fmt::format("{} = emmy_{}({}, emmy_{}_of_lanes<{}>({}));", accumulator, op, accumulator, op, node.lanes,
                             spelled(node.local)));
  }
  void stmtNode(const kernel::VectorLoad& node, int indent) {
    if (sharedBuffers_.count(node.buffer)) {
      line(indent, fmt::format("emmy_load_shared_vector<{}>({}, {}, {});", node.bytes, localAddress(node.local, node.localElement),
                               spelled(node.buffer), expr(*node.element)));
      return;
    }
    const char* vector = node.bytes == 16 ? "uint4" : "uint2";
    line(indent, fmt::format("*reinterpret_cast<{}*>({}) = *reinterpret_cast<const {}*>(&{}[{}]);", vector,
                             localAddress(node.local, node.localElement), vector, spelled(node.buffer), expr(*node.element)));
  }
  void stmtNode(const kernel::VectorStore& node, int indent) {
    if (sharedBuffers_.count(node.buffer)) {
      line(indent, fmt::format("emmy_store_shared_vector<{}>({}, {}, {});", node.bytes, spelled(node.buffer), expr(*node.element),
                               localAddress(node.local, node.localElement)));
      return;
    }
    const char* vector = node.bytes == 16 ? "uint4" : node.bytes == 8 ? "uint2" : "unsigned int";
    std::string values = node.narrowing ? fmt::format("emmy_narrowed<{}, {}>({})", vector, cudaTypeName(globalType(node.buffer)),
                                                      localAddress(node.local, node.localElement))
                                        : fmt::format("*reinterpret_cast<const {}*>({})", vector, localAddress(node.local, node.localElement));
    line(indent, fmt::format("*reinterpret_cast<{}*>(&{}[{}]) = {};", vector, spelled(node.buffer), expr(*node.element), values));
  }
  void stmtNode(const kernel::IfAligned& node, int indent) {
    std::string addresses;
    for (const kernel::Address& address : node.addresses)
      addresses += (addresses.empty() ? "" : " | ") +
                   (address.element ? fmt::format("(unsigned long long)(const void*)&{}[{}]", spelled(address.buffer), expr(*address.element))
                                    : fmt::format("(unsigned long long)(const void*){}", spelled(address.buffer)));
    std::string condition = node.condition ? expr(*node.condition) : "";
    if (!addresses.empty()) condition = fmt::format("(({}) & {}) == 0{}", addresses, node.bytes - 1, condition.empty() ? "" : " && " + condition);
    line(indent, fmt::format("if ({}) {{", condition.empty() ? "true" : condition));
    scoped(*node.aligned, indent + 1);
    line(indent, "} else {");
    scoped(*node.otherwise, indent + 1);
    line(indent, "}");
  }
  // A Kernel IR block is a scope, which C++ needs braces for only where the block declares a name again
  // that its C++ scope already has (two sibling blocks that each let the thread's index).
  void stmtNode(const kernel::Block& node, int indent) {
    std::set<std::string> declared;
    declaredBy(node, declared);
    bool again = std::any_of(declared.begin(), declared.end(), [&](const std::string& name) { return scopes_.back().count(name); });
    if (!again) {
      if (indices_) indices_->openScope();
      for (const kernel::StmtPtr& inner : node.stmts) stmt(*inner, indent);
      if (indices_) indices_->closeScope();
      return;
    }
    line(indent, "{");
    scoped(node, indent + 1);
    line(indent, "}");
  }
  // The names a block declares in its own C++ scope (the blocks inside it are printed flat).
  static void declaredBy(const kernel::Block& block, std::set<std::string>& declared) {
    for (const kernel::StmtPtr& inner : block.stmts) {
      if (const auto* let = inner->as<kernel::Let>()) declared.insert(let->var);
      if (const auto* declare = inner->as<kernel::Declare>()) declared.insert(declare->buffer);
      if (const auto* nested = inner->as<kernel::Block>()) declaredBy(*nested, declared);
    }
  }
  // `body` in a C++ scope of its own.
  void scoped(const kernel::Stmt& body, int indent) {
    scopes_.emplace_back();
    if (indices_) indices_->openScope();
    stmt(body, indent);
    if (indices_) indices_->closeScope();
    scopes_.pop_back();
  }

  // ---- functions ----
  // Every kernel receives the same parameters: the tensors, the temporaries, the scalars, the sizes
  // (their names as the IR has them with `Names`, else as spelled, declared with their types or not).
  // A kernel with 32-bit indices takes the sizes as int32_t, which the host function passes as such (the
  // GPU runtime passes each argument's bytes as they are).
  enum class ParameterText { Names, Spelled, Declared };
  std::vector<std::string> kernelParameters(ParameterText text, const std::string& indexType = "int64_t") const {
    const Kernel& source = program_.source;
    std::vector<std::string> params;
    auto add = [&](const std::string& type, const std::string& name) {
      params.push_back(text == ParameterText::Names      ? name
                       : text == ParameterText::Spelled ? spelled(name)
                                                        : type + " " + spelled(name));
    };
    for (const TensorParam& input : source.inputs) add(fmt::format("const {}*", cudaTypeName(input.dtype)), input.name);
    for (const TensorParam& output : source.outputs) add(fmt::format("{}*", cudaTypeName(output.dtype)), output.name);
    for (const loop::Temporary& temporary : program_.temporaries)
      add(fmt::format("{}*", cudaTypeName(temporary.dtype)), temporary.name);
    for (const ScalarParamDecl& scalar : source.scalars) add(cudaTypeName(scalar.dtype), scalar.name);
    // A derived size's name is its definition: its C name stands for it everywhere, even among the names.
    std::vector<std::string> sizes;
    for (const std::string& size : source.sizes) sizes.push_back(text == ParameterText::Names ? size : spelled(size));
    for (const DerivedSize& size : source.derivedSizes) sizes.push_back(sizeName(size.name));
    for (const std::string& size : sizes)
      params.push_back(text == ParameterText::Declared                           ? indexType + " " + size
                       : text == ParameterText::Spelled && indexType != "int64_t" ? "(" + indexType + ")" + size
                                                                                  : size);
    return params;
  }

  // A kernel with a 64-bit twin shares its statements with it: they are printed once, as a template
  // over the index type that both kernels instantiate.
  std::string kernelFunction(const kernel::Function& function) {
    // The block size, which guarantees the launch (ptxas keeps a block's registers within the SM's), and
    // a minimum of one resident block, which caps nothing more. A larger minimum caps the registers (32
    // blocks of 16 threads leave 64 each) and ptxas spills rather than exceed it; the block size alone
    // lets ptxas pick a register target of its own, which spilled too (residual_mlp on sm_80).
    std::string kernel = fmt::format("extern \"C\" __global__ void __launch_bounds__({}, 1) {}",
                                     function.threadsPerBlock(), function.name);
    std::string parameters = join(kernelParameters(ParameterText::Declared, indexTypeOf(function)), ", ");
    if (function.isWideTwin()) {
      std::string narrowKernel = function.name.substr(0, function.name.size() - std::string_view(kernel::kWideTwinSuffix).size());
      return fmt::format("// Computes {} (the body of {} with 64-bit indices).\n{}({}) {{\n  {}<int64_t>({});\n}}\n\n",
                         join(function.stages, ", "), narrowKernel, kernel, parameters, bodyName(narrowKernel),
                         join(kernelParameters(ParameterText::Spelled), ", "));
    }
    std::string statements = kernelBody(function);
    if (!function.indicesFit) {
      std::string width = function.indexBits == 32 ? " Its indices are 32-bit: they fit at every size." : "";
      return fmt::format("// Computes {}.{}\n{}({}) {{\n{}}}\n\n", join(function.stages, ", "), width, kernel, parameters,
                         statements);
    }
    return fmt::format("// Computes {} with indices of type {}: int32_t in {}, which the launcher runs where every index fits,\n"
                       "// int64_t in {}{}.\ntemplate <typename {}>\nstatic __device__ __forceinline__ void {}({}) {{\n{}}}\n"
                       "{}({}) {{\n  {}<int32_t>({});\n}}\n\n",
                       join(function.stages, ", "), kIndexTypeParameter, function.name, function.name,
                       kernel::kWideTwinSuffix, kIndexTypeParameter, bodyName(function.name),
                       join(kernelParameters(ParameterText::Declared, kIndexTypeParameter), ", "), statements, kernel,
                       parameters, bodyName(function.name), join(kernelParameters(ParameterText::Spelled), ", "));
  }
  static std::string bodyName(const std::string& kernel) { return kernel + kSharedBodySuffix; }
  // The statements of a kernel, over the index type of its body where it has a twin.
  std::string kernelBody(const kernel::Function& function) {
    body_.clear();
    launchSharedOffsets_.clear();
    for (const kernel::Function::SizedAtLaunch& sized : function.sharedSizedAtLaunch())
      launchSharedOffsets_[sized.buffer] = sized.offset;
    collectBuffers(kernelParameters(ParameterText::Names), function.body.get());
    if (function.indexBits == 32) indices_.emplace(function);
    sharedWithTwin_ = function.indicesFit != nullptr;
    scoped(*function.body, 1);
    indices_.reset();
    sharedWithTwin_ = false;
    return body_;
  }

  std::string hostSignature() const {
    const Kernel& source = program_.source;
    std::vector<std::string> params;
    for (const TensorParam& input : source.inputs)
      params.push_back(fmt::format("const {}* {}", cudaTypeName(input.dtype), spelled(input.name)));
    for (const TensorParam& output : source.outputs)
      params.push_back(fmt::format("{}* {}", cudaTypeName(output.dtype), spelled(output.name)));
    for (const ScalarParamDecl& scalar : source.scalars)
      params.push_back(fmt::format("{} {}", cudaTypeName(scalar.dtype), spelled(scalar.name)));
    for (const std::string& size : source.sizes) params.push_back("int64_t " + spelled(size));
    params.push_back("cudaStream_t stream");
    return fmt::format("int {}({})", source.instanceName(), join(params, ", "));
  }

  // When a set of buffers is all empty: each buffer is empty when any of its sizes is 0 (a Dim is a constant,
  // at least 1, times sizes), so a conjunction of disjunctions of sizes, none implied by another.
  using EmptyWhen = std::set<std::set<std::string>>;
  // Nothing when one of the buffers can never be empty, or there are none.
  static std::optional<EmptyWhen> emptyWhen(const std::vector<Shape>& shapes) {
    EmptyWhen terms;
    for (const Shape& shape : shapes) {
      std::set<std::string> sizes;
      for (const Dim& dim : shape) sizes.insert(dim.sizes.begin(), dim.sizes.end());
      if (sizes.empty()) return std::nullopt;
      terms.insert(std::move(sizes));
    }
    if (terms.empty()) return std::nullopt;
    // (N == 0) && (N == 0 || D == 0) is N == 0.
    for (auto term = terms.begin(); term != terms.end();) {
      bool implied = std::any_of(terms.begin(), terms.end(), [&](const std::set<std::string>& other) {
        return other != *term && std::includes(term->begin(), term->end(), other.begin(), other.end());
      });
      term = implied ? terms.erase(term) : std::next(term);
    }
    return terms;
  }
  std::string emptyCondition(const EmptyWhen& terms) const {
    std::vector<std::string> all;
    for (const std::set<std::string>& sizes : terms) {
      std::vector<std::string> any;
      for (const std::string& size : sizes) any.push_back(expr(SizeVar(size)) + " == 0");
      all.push_back(terms.size() > 1 && any.size() > 1 ? "(" + join(any, " || ") + ")" : join(any, " || "));
    }
    return join(all, " && ");
  }

  // The shapes of the global buffers (outputs and temporaries) that `function` stores.
  std::vector<Shape> storedShapes(const kernel::Function& function) const {
    std::vector<Shape> shapes;
    for (const std::string& stage : function.stages) {
      for (const TensorParam& output : program_.source.outputs)
        if (output.name == stage) shapes.push_back(output.shape);
      for (const loop::Temporary& temporary : program_.temporaries)
        if (temporary.name == stage) shapes.push_back(temporary.shape);
    }
    return shapes;
  }

  // A polynomial of sizes as C.
  std::string polynomialText(const SizePolynomial& polynomial) const {
    std::string out;
    for (const auto& [monomial, coefficient] : polynomial.orderedTerms()) {
      std::string term = expr(*dimValue(Dim{coefficient < 0 ? -coefficient : coefficient, monomial}));
      out += out.empty() ? (coefficient < 0 ? "-" : "") + term : (coefficient < 0 ? " - " : " + ") + term;
    }
    return out.empty() ? "0" : out;
  }

  // The derived sizes, each from those before it; one that is a dimension must not be negative.
  void derivedSizes() {
    const Kernel& source = program_.source;
    std::set<std::string> dimensions;
    auto collect = [&](const Shape& shape) {
      for (const Dim& dim : shape) dimensions.insert(dim.sizes.begin(), dim.sizes.end());
    };
    for (const TensorParam& input : source.inputs) collect(input.shape);
    for (const TensorParam& output : source.outputs) collect(output.shape);
    for (const Stage& stage : source.stages) collect(stage.shape());
    std::string name = source.instanceName();
    for (const DerivedSize& size : source.derivedSizes) {
      std::string numerator = polynomialText(size.numerator);
      if (size.kind != DerivedSize::Kind::Quotient) {
        std::string a = polynomialText(size.operands[0]), b = polynomialText(size.operands[1]);
        const char* pick = size.kind == DerivedSize::Kind::Minimum ? "<" : ">";
        line(1, fmt::format("const int64_t {} = ({}) {} ({}) ? ({}) : ({});", sizeName(size.name), a, pick, b, a, b));
      } else if (size.denominator == SizePolynomial::constant(1)) {
        line(1, fmt::format("const int64_t {} = {};", sizeName(size.name), numerator));
      } else {
        std::string denominator = polynomialText(size.denominator);
        line(1, fmt::format("if (({}) == 0) return emmy_fail(\"{}: the dimension {} divides by zero\");", denominator,
                            name, size.name));
        line(1, fmt::format("const int64_t {} = emmy_floor_divide({}, {});", sizeName(size.name), numerator, denominator));
      }
      if (dimensions.count(size.name))
        line(1, fmt::format("if ({} < 0) return emmy_fail(\"{}: the dimension {} is negative (%lld)\", (long long){});",
                            sizeName(size.name), name, size.name, sizeName(size.name)));
    }
  }

  std::string hostFunction() {
    const Kernel& source = program_.source;
    std::string name = source.instanceName();
    body_.clear();
    collectBuffers(kernelParameters(ParameterText::Names), nullptr);
    for (const std::string& size : source.sizes)
      line(1, fmt::format("if ({} < 0) return emmy_fail(\"{}: size {} is negative (%lld)\", (long long){});", spelled(size),
                          name, size, spelled(size)));
    derivedSizes();
    // With every output empty there is nothing to compute, and CUDA refuses a grid of 0 blocks.
    std::vector<Shape> outputShapes;
    for (const TensorParam& output : source.outputs) outputShapes.push_back(output.shape);
    std::optional<EmptyWhen> outputsEmpty = emptyWhen(outputShapes);
    if (outputsEmpty) line(1, fmt::format("if ({}) return 0;  // every output is empty", emptyCondition(*outputsEmpty)));
    // Temporaries live for the call; freeing them on the stream keeps the launches asynchronous.
    for (const loop::Temporary& temporary : program_.temporaries) {
      Dim elements = Dim::constant(1);
      for (const Dim& dim : temporary.shape) elements = elements * dim;
      line(1, fmt::format("{}* {} = nullptr;", cudaTypeName(temporary.dtype), spelled(temporary.name)));
      line(1, fmt::format("if (cudaMallocAsync((void**)&{}, (size_t)emmy_max({}, (int64_t)1) * sizeof({}), stream) != "
                          "cudaSuccess)",
                          spelled(temporary.name), expr(*dimValue(elements)), cudaTypeName(temporary.dtype)));
      line(2, fmt::format("return emmy_fail(\"{}: cannot allocate the temporary {}\");", name, temporary.name));
    }
    // The kernels of each launch variant, under the condition on the sizes that chooses it.
    const kernel::Function* previous = nullptr;
    for (const kernel::Function& function : program_.functions) {
      int indent = function.launchWhen ? 2 : 1;
      if (previous && previous->launchWhen && previous->launchWhen != function.launchWhen) line(1, "}");
      if (function.launchWhen && (!previous || previous->launchWhen != function.launchWhen))
        line(1, fmt::format("if ({}) {{", expr(*function.launchWhen)));
      previous = &function;
      // A kernel with 32-bit indices where every index fits, its 64-bit twin (the next) where not.
      if (function.indicesFit)
        line(indent++, function.indexBits == 32 ? fmt::format("if ({}) {{", expr(*function.indicesFit)) : "} else {");
      const std::array<ExprPtr, 3>& g = function.gridBlocks;
      const std::array<int, 3>& t = function.blockThreads;
      std::string grid = function.flatGrid() ? fmt::format("(unsigned)({})", expr(*g[0]))
                                             : fmt::format("(unsigned)({}), (unsigned)({}), (unsigned)({})", expr(*g[0]),
                                                           expr(*g[1]), expr(*g[2]));
      std::string block = function.flatBlock() ? std::to_string(t[0]) : fmt::format("{}, {}, {}", t[0], t[1], t[2]);
      // A kernel whose every stored buffer is empty is not launched (when that is not all the outputs, which
      // returned above): one output of two may be empty while the other still needs computing.
      std::optional<EmptyWhen> storesNothing = emptyWhen(storedShapes(function));
      bool guarded = storesNothing && storesNothing != outputsEmpty;
      if (guarded) line(indent++, fmt::format("if (!({})) {{", emptyCondition(*storesNothing)));
      if (ExprPtr bytes = function.launchSharedBytes()) {
        // Within what every device gives a block without asking, the launch gives the rows their bytes (and
        // the kernel has no other path: a launch variant's short rows). Elsewhere it gives the bytes of the
        // kernel's path that takes the most the device allows (copies tested one inside another make several
        // paths), or none, and the kernel reads the rows from global memory.
        line(indent++, "{");
        std::vector<ExprPtr> choices = function.launchSharedChoices();
        bool alwaysFits = function.mostLaunchSharedBytes() + function.declaredSharedBytes() <= kSharedBytesWithoutOptIn;
        if (alwaysFits || choices.size() == 1) {
          line(indent, fmt::format("int64_t emmy_shared_bytes = {};", expr(*bytes)));
          if (!alwaysFits)
            line(indent, fmt::format("if (emmy_shared_bytes > emmy_min(EMMY_LAUNCH_SHARED_LIMIT({}), (int64_t){})) "
                                     "emmy_shared_bytes = 0;",
                                     function.name, function.mostLaunchSharedBytes()));
        } else {
          line(indent, fmt::format("const int64_t emmy_shared_limit = emmy_min(EMMY_LAUNCH_SHARED_LIMIT({}), (int64_t){});",
                                   function.name, function.mostLaunchSharedBytes()));
          line(indent, "int64_t emmy_shared_bytes = 0;");
          for (const ExprPtr& choice : choices)
            line(indent, fmt::format("if (int64_t path = {}; path <= emmy_shared_limit) emmy_shared_bytes = emmy_max(emmy_shared_bytes, path);",
                                     expr(*choice)));
        }
        line(indent, fmt::format("EMMY_LAUNCH_SIZED({}, dim3({}), dim3({}), emmy_shared_bytes, stream, {});", function.name,
                                 grid, block, join(kernelParameters(ParameterText::Spelled, indexTypeOf(function)), ", ")));
      } else {
        line(indent, fmt::format("EMMY_LAUNCH({}, dim3({}), dim3({}), stream, {});", function.name, grid, block,
                                 join(kernelParameters(ParameterText::Spelled, indexTypeOf(function)), ", ")));
      }
      line(indent, fmt::format("if (cudaError_t error = cudaGetLastError(); error != cudaSuccess)"));
      line(indent + 1, fmt::format("return emmy_fail(\"{}: kernel {} failed: %s\", cudaGetErrorString(error));", name,
                                   function.name));
      if (function.launchSharedBytes()) line(--indent, "}");
      if (guarded) line(--indent, "}");
      if (function.isWideTwin()) line(--indent, "}");
      else if (function.indicesFit) --indent;
    }
    if (previous && previous->launchWhen) line(1, "}");
    for (const loop::Temporary& temporary : program_.temporaries) line(1, fmt::format("cudaFreeAsync({}, stream);", spelled(temporary.name)));
    line(1, "return 0;");
    return fmt::format("extern \"C\" {} {{\n{}}}\n", hostSignature(), body_);
  }

  DType globalType(const std::string& buffer) const {
    const Kernel& source = program_.source;
    for (const std::vector<TensorParam>* params : {&source.inputs, &source.outputs})
      for (const TensorParam& param : *params)
        if (param.name == buffer) return param.dtype;
    for (const loop::Temporary& temporary : program_.temporaries)
      if (temporary.name == buffer) return temporary.dtype;
    EMMY_INTERNAL_ASSERT(false, "{} is not a global buffer", buffer);
    return DType::F32;
  }

  std::string inContext(bool wrapping, const Expr& e) const {
    bool outer = wrapping_;
    wrapping_ = wrapping;
    std::string text = expr(e);
    wrapping_ = outer;
    return text;
  }

  const kernel::Program& program_;
  mutable bool wrapping_ = false;  // printing a user value (value()), not index arithmetic
  bool sharedWithTwin_ = false;    // printing the body a kernel shares with its 64-bit twin
  std::optional<kernel::IndexArithmetic> indices_;  // of the kernel being printed, when it has 32-bit indices
  std::string body_;
  std::vector<std::set<std::string>> scopes_;  // the names declared in each open C++ scope
  std::set<std::string> buffers_;              // the names of the function's buffers, scalars and sizes
  std::set<std::string> sharedBuffers_;        // the shared arrays it declares
  std::map<const kernel::Declare*, ExprPtr> launchSharedOffsets_;  // of its buffers sized at launch, in bytes
  bool copiesAsynchronously_ = false;
  bool usesTensorCores_ = false;
  bool transposesQuads_ = false;
};

// Helpers every generated file defines for itself (static, so that several files link together).
const char* kPrelude = R"(#include <stdint.h>
#if !defined(EMMY_SIMULATE) && !defined(EMMY_HOST_ONLY)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif

// A shared array (aligned for 16-byte copies); the simulation of `emmy check` defines its own, which
// checks every access.
#ifndef EMMY_SHARED
#define EMMY_SHARED(type, name, count) __shared__ __align__(16) type name[count]
#endif

#define EMMY_INLINE [[maybe_unused]] static __host__ __device__ __forceinline__
// The most a kernel with 32-bit indices may compute as an index: the launcher runs it where the bound of
// its indices is at most this (the simulation of `emmy check` may lower it to run the 64-bit twin).
#ifndef EMMY_INDEX_LIMIT
#define EMMY_INDEX_LIMIT 2147483647
#endif
EMMY_INLINE float emmy_f32(__half x) { return __half2float(x); }
EMMY_INLINE float emmy_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
EMMY_INLINE __half emmy_f16(float x) { return __float2half_rn(x); }
EMMY_INLINE __nv_bfloat16 emmy_bf16(float x) { return __float2bfloat16_rn(x); }
// A pair of f32 values rounded to f16 or bf16 in one cvt.rn.f16x2.f32 (bf16x2) on sm_80 and later, and
// the vector of such pairs a narrowing store writes (the same roundings, half the instructions).
EMMY_INLINE void emmy_narrow_pair(__half* pair, float low, float high) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  *reinterpret_cast<__half2*>(pair) = __floats2half2_rn(low, high);
#else
  pair[0] = emmy_f16(low), pair[1] = emmy_f16(high);
#endif
}
EMMY_INLINE void emmy_narrow_pair(__nv_bfloat16* pair, float low, float high) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  *reinterpret_cast<__nv_bfloat162*>(pair) = __floats2bfloat162_rn(low, high);
#else
  pair[0] = emmy_bf16(low), pair[1] = emmy_bf16(high);
#endif
}
template <typename Vector, typename T> EMMY_INLINE Vector emmy_narrowed(const float* wide) {
  alignas(16) T narrow[sizeof(Vector) / sizeof(T)];
  for (int e = 0; e < (int)(sizeof(Vector) / sizeof(T)); e += 2) emmy_narrow_pair(&narrow[e], wide[e], wide[e + 1]);
  return *reinterpret_cast<const Vector*>(narrow);
}
// Integer +, -, * and negation of values wrap, as the language says: signed overflow is undefined in
// C++ (nvcc folds `a + 1 > a` to true), so they run on the unsigned type, whose arithmetic wraps, and
// convert back (modulo 2^N). Index arithmetic stays plain: it is bounded by the sizes of tensors.
#define EMMY_WRAPPING(T, U)                                                    \
  EMMY_INLINE T emmy_add(T a, T b) { return (T)(U)((U)a + (U)b); }             \
  EMMY_INLINE T emmy_sub(T a, T b) { return (T)(U)((U)a - (U)b); }             \
  EMMY_INLINE T emmy_mul(T a, T b) { return (T)(U)((U)a * (U)b); }             \
  EMMY_INLINE T emmy_neg(T a) { return (T)(U)((U)0 - (U)a); }
EMMY_WRAPPING(int8_t, uint8_t)
EMMY_WRAPPING(int32_t, uint32_t)
EMMY_WRAPPING(int64_t, uint64_t)
#undef EMMY_WRAPPING
// Integer division and remainder truncate; by zero they give 0, and MIN / -1 wraps.
template <typename T> EMMY_INLINE T emmy_div(T a, T b) { return b == 0 ? T(0) : b == T(-1) ? emmy_neg(a) : T(a / b); }
template <typename T> EMMY_INLINE T emmy_mod(T a, T b) { return b == 0 || b == T(-1) ? T(0) : T(a % b); }
template <typename T> EMMY_INLINE T emmy_ipow(T base, T exponent) {
  if (exponent < 0) return base == 1 ? T(1) : base == T(-1) ? (exponent % 2 == 0 ? T(1) : T(-1)) : T(0);
  T result = 1;
  for (; exponent > 0; exponent >>= 1, base = emmy_mul(base, base))
    if (exponent & 1) result = emmy_mul(result, base);
  return result;
}
// Bytes / sizeof(T) elements of a shared array from element i (aligned to Bytes) into a thread's local
// array: one 8- or 16-byte shared load.
template <int Bytes, typename T, typename Shared>
static __device__ __forceinline__ void emmy_load_shared_vector(T* local, Shared& shared, int64_t i) {
#if defined(EMMY_SIMULATE)
  shared.readVector(i, local, Bytes);
#elif defined(__CUDA_ARCH__)
  if constexpr (Bytes == 16)
    *reinterpret_cast<uint4*>(local) = *reinterpret_cast<const uint4*>(&shared[i]);
  else
    *reinterpret_cast<uint2*>(local) = *reinterpret_cast<const uint2*>(&shared[i]);
#endif
}
// The other way: Bytes / sizeof(T) elements of a thread's local array into a shared array from element i
// (aligned to Bytes), one 8- or 16-byte shared store.
template <int Bytes, typename Shared, typename T>
static __device__ __forceinline__ void emmy_store_shared_vector(Shared& shared, int64_t i, const T* local) {
#if defined(EMMY_SIMULATE)
  shared.writeVector(i, local, Bytes);
#elif defined(__CUDA_ARCH__)
  if constexpr (Bytes == 16)
    *reinterpret_cast<uint4*>(&shared[i]) = *reinterpret_cast<const uint4*>(local);
  else
    *reinterpret_cast<uint2*>(&shared[i]) = *reinterpret_cast<const uint2*>(local);
#endif
}
// Float min and max propagate NaN (fminf and fmaxf would drop it): one min.NaN or max.NaN on sm_80 and
// later, where the tests and selects take 5 instructions.
EMMY_INLINE float emmy_min(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a != a || b != b ? a + b : (b < a ? b : a);
#endif
}
EMMY_INLINE float emmy_max(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return a != a || b != b ? a + b : (a < b ? b : a);
#endif
}
EMMY_INLINE double emmy_min(double a, double b) { return a != a || b != b ? a + b : (b < a ? b : a); }
EMMY_INLINE double emmy_max(double a, double b) { return a != a || b != b ? a + b : (a < b ? b : a); }
// The max (min) of `Lanes` f16 or bf16 values as f32, NaN where one is (Kernel IR's CombineLanes): on
// sm_80 and later max.NaN.f16x2 (bf16x2) a pair at a time and one widening of the last pair.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
template <typename T> struct emmy_pair_of;
template <> struct emmy_pair_of<__half> { using type = __half2; };
template <> struct emmy_pair_of<__nv_bfloat16> { using type = __nv_bfloat162; };
#endif
template <int Lanes, bool Max, typename T> EMMY_INLINE float emmy_extreme_of_lanes(const T* lanes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  using Pair = typename emmy_pair_of<T>::type;
  const Pair* pairs = reinterpret_cast<const Pair*>(lanes);
  Pair extreme = pairs[0];
  for (int p = 1; p < Lanes / 2; ++p) extreme = Max ? __hmax2_nan(extreme, pairs[p]) : __hmin2_nan(extreme, pairs[p]);
  float low = __low2float(extreme), high = __high2float(extreme);
  return Max ? emmy_max(low, high) : emmy_min(low, high);
#else
  float extreme = emmy_f32(lanes[0]);
  for (int lane = 1; lane < Lanes; ++lane)
    extreme = Max ? emmy_max(extreme, emmy_f32(lanes[lane])) : emmy_min(extreme, emmy_f32(lanes[lane]));
  return extreme;
#endif
}
template <int Lanes, typename T> EMMY_INLINE float emmy_max_of_lanes(const T* lanes) { return emmy_extreme_of_lanes<Lanes, true>(lanes); }
template <int Lanes, typename T> EMMY_INLINE float emmy_min_of_lanes(const T* lanes) { return emmy_extreme_of_lanes<Lanes, false>(lanes); }
template <typename T> EMMY_INLINE T emmy_min(T a, T b) { return b < a ? b : a; }
template <typename T> EMMY_INLINE T emmy_max(T a, T b) { return a < b ? b : a; }
template <typename T> EMMY_INLINE T emmy_abs(T a) { return a < 0 ? emmy_neg(a) : a; }
template <typename T> EMMY_INLINE T emmy_relu(T a) { return a > 0 ? a : T(0); }
// 2^x and e^x by the hardware's approximation (ex2.approx: a few units in the last place of f32, and for
// e^x the rounding of x log2 e), for values only results rounded to 16 bits show (approximate_exponentials.h).
EMMY_INLINE float emmy_exp2_approximate(float x) {
#if defined(__CUDA_ARCH__)
  float result;
  asm("ex2.approx.f32 %0, %1;" : "=f"(result) : "f"(x));
  return result;
#else
  return exp2f(x);
#endif
}
EMMY_INLINE float emmy_exp_approximate(float x) { return emmy_exp2_approximate(x * 1.44269504088896341f); }
EMMY_INLINE float emmy_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
EMMY_INLINE double emmy_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
EMMY_INLINE float emmy_silu(float x) { return x / (1.0f + expf(-x)); }
EMMY_INLINE double emmy_silu(double x) { return x / (1.0 + exp(-x)); }
EMMY_INLINE float emmy_gelu(float x) { return x * 0.5f * (1.0f + erff(x * 0.70710678118654752f)); }
EMMY_INLINE double emmy_gelu(double x) { return x * 0.5 * (1.0 + erf(x * 0.70710678118654752)); }
// Float to integer: truncates, saturates to int64, NaN gives 0; narrower types then wrap.
EMMY_INLINE int64_t emmy_truncate(double x) {
  return x != x ? 0 : x >= 9.2233720368547758e18 ? INT64_MAX : x <= -9.2233720368547758e18 ? INT64_MIN : (int64_t)x;
}
)";

// Double buffering: cp.async on sm_80 and later for elements of 4, 8 or 16 bytes (a source out of bounds
// copies 0 and is not read), an ordinary copy on older targets; the CPU simulation lands each copy at the
// wait that covers it.
const char* kAsyncCopyPrelude = R"(template <typename Shared, typename T>
static __device__ __forceinline__ void emmy_copy_async(Shared& shared, int64_t i, const T* global, int64_t j, bool inside) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8 || sizeof(T) == 16) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"((unsigned)__cvta_generic_to_shared(&shared[i])),
                 "l"(global + j), "n"(sizeof(T)), "r"(inside ? (int)sizeof(T) : 0));
    return;
  }
#elif defined(EMMY_SIMULATE)
  // Lands when a wait covers it, as on the GPU: the race checks see the wait's barriers, not the start's.
  shared.copyLater(i, inside ? global[j] : T{});
  return;
#endif
  shared[i] = inside ? global[j] : T{};
}
// Lanes consecutive elements, the first `inside` of them read: one 16-byte cp.async when all are and the
// source is aligned (the shared side is: its rows are whole vectors), one 16-byte store of zeros when none
// is (a tile past the end), element by element otherwise.
template <int Lanes, typename Shared, typename T>
static __device__ __forceinline__ void emmy_copy_async_lanes(Shared& shared, int64_t i, const T* global, int64_t j,
                                                             int64_t inside) {
  if constexpr (Lanes * sizeof(T) == 16) {
    if (inside <= 0) {
      alignas(16) const T zeros[Lanes]{};
      emmy_store_shared_vector<16>(shared, i, zeros);
      return;
    }
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (Lanes * sizeof(T) == 16) {
    if (inside >= Lanes && ((unsigned long long)(const void*)(global + j) & 15) == 0) {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"((unsigned)__cvta_generic_to_shared(&shared[i])),
                   "l"(global + j));
      return;
    }
  }
#elif defined(EMMY_SIMULATE)
  // The simulation takes the same 16-byte path, so that `emmy check --profile` counts what the GPU does.
  if constexpr (Lanes * sizeof(T) == 16) {
    if (inside >= Lanes && ((unsigned long long)(const void*)(global + j) & 15) == 0) {
      shared.copyVector(i, global + j);
      return;
    }
  }
#endif
  for (int lane = 0; lane < Lanes; ++lane) emmy_copy_async(shared, i + lane, global, j + lane, lane < inside);
}
template <int Pending> static __device__ __forceinline__ void emmy_wait_for_copies() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\ncp.async.wait_group %0;\n" ::"n"(Pending));
#elif defined(EMMY_SIMULATE)
  ::emmy_sim::detail::scheduler.waitForCopies(Pending);
#endif
}
)";

// ldmatrix and mma.sync (m16n8k16, f32 accumulators) on sm_80 and later; the simulation of `emmy check`
// defines its own, from the PTX ISA's fragment layouts. A fragment is uint32_t registers of two 16-bit
// elements each.
const char* kTensorCorePrelude = R"(#if !defined(EMMY_SIMULATE)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "this file runs products on the tensor cores (mma.sync m16n8k16), which need sm_80 or later"
#endif
template <int Count, bool Transpose, typename T>
static __device__ __forceinline__ void emmy_ldmatrix(uint32_t* fragment, T* shared, int64_t element) {
#if defined(__CUDA_ARCH__)
  const unsigned address = (unsigned)__cvta_generic_to_shared(shared + element);
  if constexpr (Count == 4 && Transpose)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3]) : "r"(address));
  else if constexpr (Count == 4)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3]) : "r"(address));
  else
    static_assert(Count == 4, "ldmatrix x4 only");
#endif
}
#if defined(__CUDA_ARCH__)
// One struct per operand type rather than specializations of the function: an explicit specialization
// that a file does not call is a warning ("declared but never referenced").
template <typename T>
struct emmy_mma_ptx;
#define EMMY_MMA_M16N8K16(T, ptx_type)                                                                             \
  template <>                                                                                                      \
  struct emmy_mma_ptx<T> {                                                                                         \
    static __device__ __forceinline__ void run(float* d, const uint32_t* a, const uint32_t* b) {                   \
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." ptx_type "." ptx_type ".f32 {%0, %1, %2, %3}, "       \
                   "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"                                               \
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                                \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));                            \
    }                                                                                                              \
  };
EMMY_MMA_M16N8K16(__half, "f16")
EMMY_MMA_M16N8K16(__nv_bfloat16, "bf16")
#undef EMMY_MMA_M16N8K16
template <typename T>
static __device__ __forceinline__ void emmy_mma_m16n8k16(float* d, const uint32_t* a, const uint32_t* b) {
  emmy_mma_ptx<T>::run(d, a, b);
}
#else
// The host pass compiles the device code too, but never runs it.
template <typename T>
static __device__ __forceinline__ void emmy_mma_m16n8k16(float*, const uint32_t*, const uint32_t*) {}
#endif
#endif
)";

// The 4 x 4 transpose of 32-bit words across each quad of lanes: in round r each lane reads, from the
// lane r below it in its quad, the word meant for it (the sender picks it by selects, which keeps the
// words in registers where an index by lane would put them in local memory).
const char* kQuadTransposePrelude = R"(static __device__ __forceinline__ void emmy_transpose_quad(uint32_t* words, int64_t lane) {
#if defined(__CUDA_ARCH__) || defined(EMMY_SIMULATE)
  const unsigned quadLane = (unsigned)lane & 3u;
  const uint32_t own[4] = {words[0], words[1], words[2], words[3]};
#pragma unroll
  for (unsigned round = 1; round < 4; ++round) {
    const unsigned sent = (quadLane + round) & 3u, from = (quadLane - round) & 3u;
    const uint32_t word = sent == 0 ? own[0] : sent == 1 ? own[1] : sent == 2 ? own[2] : own[3];
    const uint32_t received = __shfl_sync(0xffffffffu, word, (int)from, 4);
#pragma unroll
    for (unsigned j = 0; j < 4; ++j)
      if (j == from) words[j] = received;
  }
#endif
}
)";

const char* kHostPrelude = R"(#ifndef __CUDACC_RTC__
#include <stdarg.h>
#include <stdio.h>
#if !defined(EMMY_SIMULATE) && !defined(EMMY_HOST_ONLY)
#include <cuda_runtime.h>
#define EMMY_LAUNCH(kernel, grid, block, stream, ...) kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
#endif
// One message buffer for every generated file linked into a program: the weak definitions merge.
extern "C" __attribute__((weak)) char* emmy_error_buffer(void) {
  static thread_local char buffer[1024];
  return buffer;
}
extern "C" __attribute__((weak)) const char* emmy_last_error(void) { return emmy_error_buffer(); }
static int emmy_fail(const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  vsnprintf(emmy_error_buffer(), 1024, format, arguments);
  va_end(arguments);
  return 1;
}
#endif  // __CUDACC_RTC__
)";

// The floor of a / b, for a derived size (LANGUAGE.md section 2: `/` in a dimension is floor division).
const char* kFloorDividePrelude = R"(#ifndef __CUDACC_RTC__
static int64_t emmy_floor_divide(int64_t a, int64_t b) {
  int64_t quotient = a / b;
  return (a % b != 0 && (a < 0) != (b < 0)) ? quotient - 1 : quotient;
}
#endif  // __CUDACC_RTC__
)";

// Shared memory sized at launch (extern __shared__): the arrays in it, and how much the launch gave. The
// simulation of `emmy check` defines its own, which checks every access against what the launch sized.
const char* kSizedAtLaunchPrelude = R"(#ifndef EMMY_SHARED_SIZED_AT_LAUNCH
// The shared array `name` of `count` elements at most, from byte `offset` of the launch's shared memory
// (`elements`, what it has at this launch, is the simulation's to check).
#define EMMY_SHARED_SIZED_AT_LAUNCH(type, name, count, offset, elements) \
  extern __shared__ __align__(16) unsigned char emmy_launch_shared[];   \
  type* const name = reinterpret_cast<type*>(emmy_launch_shared + (offset))
// The bytes of shared memory the launch sized (%dynamic_smem_size).
static __device__ __forceinline__ unsigned emmy_launch_shared_bytes() {
  unsigned bytes = 0;
#if defined(__CUDA_ARCH__)
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(bytes));
#endif
  return bytes;
}
#endif
)";

// The launch of a kernel with shared memory sized at launch, and the most the device lets it have.
const char* kSizedAtLaunchHostPrelude = R"(#if !defined(__CUDACC_RTC__) && !defined(EMMY_SIMULATE) && !defined(EMMY_HOST_ONLY)
// The device's most shared memory per block (opting in), less what `kernel` declares itself; 0 when
// the runtime cannot say, and the kernel then reads its rows from global memory.
static int64_t emmy_launch_shared_limit(const void* kernel) {
  int device = 0, most = 0;
  cudaFuncAttributes attributes;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess ||
      cudaFuncGetAttributes(&attributes, kernel) != cudaSuccess)
    return 0;
  return (int64_t)most - (int64_t)attributes.sharedSizeBytes;
}
#define EMMY_LAUNCH_SHARED_LIMIT(kernel) emmy_launch_shared_limit((const void*)(kernel))
// Beyond 48 KiB, a kernel takes shared memory sized at launch only where it opts in.
#define EMMY_LAUNCH_SIZED(kernel, grid, block, bytes, stream, ...)                                        \
  do {                                                                                                    \
    cudaFuncSetAttribute((const void*)(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(bytes)); \
    kernel<<<(grid), (block), (size_t)(bytes), (stream)>>>(__VA_ARGS__);                                 \
  } while (0)
#endif
)";

}  // namespace

bool callsSharedBody(std::string_view line) {
  for (const char* type : {"<int32_t>(", "<int64_t>("})
    if (line.find(std::string(kSharedBodySuffix) + type) != std::string_view::npos) return true;
  return false;
}

GeneratedCuda emitCuda(const std::vector<kernel::Program>& programs, const std::string& baseName,
                       const std::string& sourceFile) {
  std::string kernels, declarations;
  std::vector<std::string> names;
  bool copiesAsynchronously = false, usesTensorCores = false, transposesQuads = false, sizesSharedAtLaunch = false,
       dividesSizes = false;
  for (const kernel::Program& program : programs) {
    Emitter emitter(program);
    kernels += emitter.emit() + "\n";
    declarations += emitter.declaration();
    copiesAsynchronously = copiesAsynchronously || emitter.copiesAsynchronously();
    usesTensorCores = usesTensorCores || emitter.usesTensorCores();
    transposesQuads = transposesQuads || emitter.transposesQuads();
    sizesSharedAtLaunch = sizesSharedAtLaunch || emitter.sizesSharedAtLaunch();
    dividesSizes = dividesSizes || emitter.dividesSizes();
    names.push_back(program.source.instanceName());
  }
  // (Whether a schedule was written or the default policy's is not said: the same schedule either way
  // builds the same file.)
  std::string banner = fmt::format("// Generated by Emmy from {} (kernels: {}). Do not edit.\n", sourceFile, join(names, ", "));
  GeneratedCuda generated;
  generated.baseName = baseName;
  generated.header = banner + R"(#pragma once
#include <stdint.h>
#if !defined(EMMY_SIMULATE) && !defined(EMMY_HOST_ONLY)
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#endif
#ifdef __cplusplus
extern "C" {
#endif
)" + declarations + R"(const char* emmy_last_error(void);
#ifdef __cplusplus
}
#endif
)";
  generated.source = banner + "#ifndef __CUDACC_RTC__\n#include \"" + baseName + ".h\"\n#endif\n" + kPrelude +
                     (copiesAsynchronously ? kAsyncCopyPrelude : "") +
                     (usesTensorCores ? kTensorCorePrelude : "") + (transposesQuads ? kQuadTransposePrelude : "") +
                     (sizesSharedAtLaunch ? kSizedAtLaunchPrelude : "") + kHostPrelude +
                     (sizesSharedAtLaunch ? kSizedAtLaunchHostPrelude : "") + (dividesSizes ? kFloorDividePrelude : "") +
                     "\n" + kernels;
  return generated;
}

}  // namespace emmy::cuda
