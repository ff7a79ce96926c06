// Kernel calls in whole-tensor form: the callee's instance is expanded in place. Its stages become
// stages of the caller named RESULT__STAGE (RESULT_1__STAGE for a second call in the statement), its
// inputs read the arguments, and its sizes and scalars become the caller's expressions.
#include <fmt/format.h>

#include "frontend/elaborator.h"
#include "frontend/operations.h"
#include "ir/tensor/build.h"
#include "ir/tensor/rewrite.h"
#include "support/text.h"

namespace emmy {

using namespace tensor;

std::vector<TensorValue> KernelElaboration::callKernel(const LoadedModule& calleeModule, const ast::KernelDef& callee,
                                                       const ast::Call& c, Scope& scope,
                                                       const std::vector<std::string>& resultNames) {
  const std::string& calleeName = callee.name.name;
  std::string prefix = callsInStatement == 0 ? target : fmt::format("{}_{}", target, callsInStatement);
  ++callsInStatement;

  // Arguments, by parameter: the inputs, then the integer parameters (usually given by name, STRIDE=2).
  std::vector<std::string> params;
  for (const ast::Param& param : callee.inputs) params.push_back(param.name.name);
  std::vector<std::string> allParams = params;
  for (const ast::IntegerParam& param : callee.integerParams) allParams.push_back(param.name.name);
  std::vector<const ast::Expr*> args = matchArguments(calleeName, allParams, 0, c);
  IntegerArguments integers;
  for (size_t k = params.size(); k < allParams.size(); ++k) {
    if (!args[k]) continue;
    TensorValue value = expr(*args[k], scope);
    if (!value.literal || !value.literal->isInteger)
      error(args[k]->loc, fmt::format("the integer parameter {} of '{}' takes an integer known when compiling (a "
                                      "literal or an integer parameter of '{}')",
                                      allParams[k], calleeName, def.name.name));
    integers[allParams[k]] = static_cast<int64_t>(value.literal->value);
  }
  args.resize(params.size());
  std::vector<std::optional<TensorValue>> values(params.size());
  for (size_t k = 0; k < params.size(); ++k) {
    if (args[k]) {
      values[k] = expr(*args[k], scope);
    } else if (!callee.inputs[k].defaultValue) {
      error(c.loc, fmt::format("missing argument '{}' of '{}'", params[k], calleeName));
    }
  }

  // Type parameters, from the arguments declared with them.
  TypeArguments types;
  std::map<std::string, std::string> boundBy;  // type parameter -> the argument that fixed it
  for (const ast::TypeParam& typeParam : callee.typeParams) {
    for (size_t k = 0; k < params.size(); ++k) {
      const ast::Param& param = callee.inputs[k];
      if (param.type.elementType.name != typeParam.name.name || !values[k] || values[k]->literal) continue;
      DType dtype = values[k]->dtype;
      auto [it, fresh] = types.emplace(typeParam.name.name, dtype);
      if (fresh) {
        boundBy[typeParam.name.name] = params[k];
      } else if (it->second != dtype) {
        error(args[k]->loc, fmt::format("the arguments of '{}' disagree on {}: '{}' is {} but '{}' is {}", calleeName,
                                        typeParam.name.name, boundBy[typeParam.name.name], dtypeName(it->second),
                                        params[k], dtypeName(dtype)));
      }
    }
    auto it = types.find(typeParam.name.name);
    if (it == types.end())
      error(c.loc, fmt::format("cannot infer the type parameter {} of '{}' from its arguments", typeParam.name.name,
                               calleeName));
    std::vector<std::string> bound;
    for (const ast::Ident& type : typeParam.bound) bound.push_back(type.name);
    if (std::find(bound.begin(), bound.end(), dtypeName(it->second)) == bound.end())
      error(c.loc, fmt::format("'{}' is called with {} = {}, outside the bound of {}: {}", calleeName,
                               typeParam.name.name, dtypeName(it->second), typeParam.name.name, join(bound, " | ")));
  }
  const Kernel* instance = program.instantiate(calleeModule, callee, types, integers, c.loc);
  if (!instance) throw CompilationAborted{};

  // Sizes, from the shapes of the tensor arguments; tensor inputs by name; scalars by expression.
  std::map<std::string, Dim> sizes;
  std::map<std::string, std::string> sizeSource;
  std::map<std::string, std::string> tensorArguments;
  std::map<std::string, ExprPtr> scalarArguments;
  std::vector<std::pair<size_t, size_t>> checkedLater;  // (argument, dimension) of a dimension that binds no size
  for (size_t k = 0; k < params.size(); ++k) {
    const std::string& param = params[k];
    if (const TensorParam* input = instance->findInput(param)) {
      const TensorValue& value = *values[k];
      if (value.literal || value.rank() != static_cast<int>(input->shape.size()))
        error(args[k]->loc, fmt::format("argument '{}' of '{}' must have shape {}, not {}", param, calleeName,
                                        shapeToString(input->shape),
                                        value.literal ? std::string("a number") : shapeToString(value.shape)));
      if (value.dtype != input->dtype)
        error(args[k]->loc, fmt::format("argument '{}' of '{}' has type {} but '{}' expects {}", param, calleeName,
                                        dtypeName(value.dtype), calleeName, dtypeName(input->dtype)));
      for (size_t d = 0; d < input->shape.size(); ++d) {
        const Dim& expected = input->shape[d];
        const Dim& actual = value.shape[d];
        if (expected.isConstant()) {
          if (!(expected == actual))
            error(args[k]->loc, fmt::format("argument '{}' of '{}' must have size {} in dimension {}, not {}", param,
                                            calleeName, expected.toString(), d, actual.toString()));
          continue;
        }
        if (expected.factor != 1 || expected.sizes.size() != 1 || instance->findDerivedSize(expected.sizes[0])) {
          checkedLater.emplace_back(k, d);
          continue;
        }
        const std::string& size = expected.sizes.front();
        auto [it, fresh] = sizes.emplace(size, actual);
        if (fresh)
          sizeSource[size] = param;
        else if (!(it->second == actual))
          error(args[k]->loc, fmt::format("size {} of '{}' is {} from '{}' but {} from '{}'", size, calleeName,
                                          it->second.toString(), sizeSource[size], actual.toString(), param));
      }
      std::string argumentName = value.tensorName;
      if (argumentName.empty()) argumentName = materialize(callStageName(prefix, param, c.loc), value, args[k]->loc).name;
      tensorArguments[param] = argumentName;
      continue;
    }
    const ScalarParamDecl* scalar = nullptr;
    for (const ScalarParamDecl& s : instance->scalars)
      if (s.name == param) scalar = &s;
    EMMY_INTERNAL_ASSERT(scalar != nullptr, "parameter {} of {} is neither tensor nor scalar", param, calleeName);
    if (!values[k]) {
      scalarArguments[param] = scalar->defaultValue;
      continue;
    }
    if (!values[k]->isScalar())
      error(args[k]->loc, fmt::format("argument '{}' of '{}' must be a scalar, not a tensor of shape {}", param,
                                      calleeName, shapeToString(values[k]->shape)));
    scalarArguments[param] = values[k]->at({}, scalar->dtype);
  }

  auto substituteDim = [&](const Dim& dim) {
    Dim result = Dim::constant(dim.factor);
    for (const std::string& size : dim.sizes) result = result * sizes.at(size);
    return result;
  };
  // The callee's derived sizes in the caller's terms, each from those before it.
  auto substitutePolynomial = [&](const SizePolynomial& polynomial) {
    SizePolynomial result;
    for (const auto& [monomial, coefficient] : polynomial.terms) {
      SizePolynomial term = SizePolynomial::constant(coefficient);
      for (const std::string& size : monomial) term = term * polynomialOf(kernel, sizes.at(size));
      result = result + term;
    }
    return result;
  };
  for (const DerivedSize& derived : instance->derivedSizes) {
    if (derived.kind != DerivedSize::Kind::Quotient) {
      SizePolynomial extreme = extremePolynomial(kernel, derived.kind, substitutePolynomial(derived.operands[0]),
                                                 substitutePolynomial(derived.operands[1]));
      sizes[derived.name] = derivedDim(kernel, extreme, SizePolynomial::constant(1));
      continue;
    }
    SizePolynomial numerator = substitutePolynomial(derived.numerator);
    SizePolynomial denominator = substitutePolynomial(derived.denominator);
    if (denominator.constantValue() == 0)
      error(c.loc, fmt::format("with these arguments the dimension {} of '{}' divides by zero", derived.name, calleeName));
    // A constant may be 0 or negative where it only feeds other sizes; one that is a dimension is checked below.
    sizes[derived.name] = derivedDim(kernel, numerator, denominator);
  }
  for (const Stage& stage : instance->stages)
    for (const Axis& axis : stage.axes)
      if (Dim dim = substituteDim(axis.extent); dim.isConstant() && dim.factor < 1)
        error(c.loc, fmt::format("with these arguments '{}' gives '{}' a dimension {} = {}, less than 1", calleeName,
                                 stage.name, axis.extent.toString(), dim.factor));
  for (const auto& [k, d] : checkedLater) {
    const TensorParam& input = *instance->findInput(params[k]);
    Dim expected = substituteDim(input.shape[d]);
    if (!(expected == values[k]->shape[d]))
      error(args[k]->loc, fmt::format("argument '{}' of '{}' must have size {} in dimension {}, not {}", params[k],
                                      calleeName, expected.toString(), d, values[k]->shape[d].toString()));
  }

  // Stage names in the caller.
  std::map<std::string, std::string> renamed = tensorArguments;
  for (const Stage& stage : instance->stages) {
    std::string name;
    for (size_t k = 0; k < instance->outputs.size() && k < resultNames.size(); ++k) {
      if (instance->outputs[k].name != stage.name) continue;
      // The k-th result takes the statement's k-th name directly when it fits there unchanged.
      auto symbol = symbols.find(resultNames[k]);
      Shape shape;
      for (const Axis& axis : stage.axes) shape.push_back(substituteDim(axis.extent));
      bool fits = symbol == symbols.end() ||
                  (symbol->second.kind == Symbol::Kind::Output && !symbol->second.defined &&
                   symbol->second.dtype == stage.dtype && symbol->second.shape == shape);
      if (fits) name = resultNames[k];
    }
    if (name.empty()) name = callStageName(prefix, stage.name, c.loc);
    renamed[stage.name] = name;
  }

  std::function<ExprPtr(const ExprPtr&)> substitute = [&](const ExprPtr& e) {
    return rewrite(e, [&](const Expr& node) -> ExprPtr {
      if (const auto* load = node.as<Load>()) {
        std::vector<ExprPtr> indices;
        for (const ExprPtr& index : load->indices) indices.push_back(substitute(index));
        return std::make_shared<Load>(load->dtype, renamed.at(load->tensor), indices,
                                      load->padValue ? substitute(load->padValue) : nullptr);
      }
      if (const auto* size = node.as<SizeVar>()) return dimValue(sizes.at(size->name));
      if (const auto* scalar = node.as<ScalarParam>()) return scalarArguments.at(scalar->name);
      return nullptr;
    });
  };
  for (const Stage& stage : instance->stages) {
    Stage copy = stage;
    copy.name = renamed.at(stage.name);
    for (Axis& axis : copy.axes) axis.extent = substituteDim(axis.extent);
    if (copy.reduction)
      for (Axis& axis : copy.reduction->axes) axis.extent = substituteDim(axis.extent);
    copy.body = substitute(stage.body);
    addStage(std::move(copy));
  }

  std::vector<TensorValue> results;
  CalleeSchedule schedule{{}, calleeDirectives(*instance, prefix, renamed, sizes)};
  for (const TensorParam& output : instance->outputs) {
    const Stage& stage = *kernel.findStage(renamed.at(output.name));
    results.push_back(TensorValue::ofTensor(stage.name, stage.dtype, stage.shape(), c.loc));
    schedule.results.push_back(stage.name);
  }
  if (!schedule.directives.empty()) calleeSchedules.push_back(std::move(schedule));
  return results;
}

std::string KernelElaboration::callStageName(const std::string& prefix, const std::string& name, const SourceLoc& call) {
  std::string generated = prefix + "__" + name;
  auto symbol = symbols.find(generated);
  if (symbol == symbols.end()) {
    callNames[generated] = {target, call};
    return generated;
  }
  auto earlier = callNames.find(generated);
  if (earlier == callNames.end())
    error(call, fmt::format("this call would name a stage '{}', the name the reduction at {}:{} already gave the stage "
                            "that holds it; write that reduction as a statement of its own, or rename a result",
                            generated, symbol->second.loc.line, symbol->second.loc.column));
  const auto& [otherTarget, otherCall] = earlier->second;
  error(call, fmt::format("this call would name a stage '{}', the name the call at {}:{} already gave one: a call's "
                          "stages are named RESULT__STAGE (RESULT_1__STAGE for a second call in a statement, and so on), "
                          "so the calls in the statements of '{}' and '{}' make the same names; rename one of them",
                          generated, otherCall.line, otherCall.column, otherTarget, target));
}

}  // namespace emmy
