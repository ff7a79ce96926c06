#include "support/cpp_names.h"

#include <algorithm>
#include <array>
#include <set>
#include <string>

#include <fmt/format.h>

namespace emmy {

namespace {

enum class Meaning { None, Keyword, Macro, CLibrary, Cuda, Generated };

const std::set<std::string_view>& keywords() {
  static const std::set<std::string_view> words = {
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break", "case", "catch", "char",
      "char8_t", "char16_t", "char32_t", "class", "compl", "concept", "const", "consteval", "constexpr", "constinit",
      "const_cast", "continue", "co_await", "co_return", "co_yield", "decltype", "default", "delete", "do", "double",
      "dynamic_cast", "else", "enum", "explicit", "export", "extern", "false", "final", "float", "for", "friend", "goto",
      "if", "import", "inline", "int", "long", "module", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
      "nullptr", "operator", "or", "or_eq", "override", "private", "protected", "public", "register",
      "reinterpret_cast", "requires", "restrict", "return", "short", "signed", "sizeof", "static", "static_assert",
      "static_cast", "struct", "switch", "template", "this", "thread_local", "throw", "true", "try", "typedef",
      "typeid", "typename", "union", "unsigned", "using", "virtual", "void", "volatile", "wchar_t", "while", "xor",
      "xor_eq"};
  return words;
}

const std::set<std::string_view>& headerMacros() {
  static const std::set<std::string_view> macros = {
#include "support/header_macros.inc"
  };
  return macros;
}

// The C library's functions (C11 and POSIX's most common), each math function also with its f and l
// forms, and CUDA's device math beyond them.
const std::set<std::string>& cLibrary() {
  static const std::set<std::string> names = [] {
    std::set<std::string> out;
    for (std::string_view math :
         {"acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "copysign", "cos", "cosh", "erf",
          "erfc", "exp", "exp2", "exp10", "expm1", "fabs", "fdim", "floor", "fma", "fmax", "fmin", "fmod", "frexp", "hypot",
          "ilogb", "ldexp", "lgamma", "llrint", "llround", "log", "log10", "log1p", "log2", "logb", "lrint", "lround",
          "modf", "nan", "nearbyint", "nextafter", "nexttoward", "pow", "remainder", "remquo", "rint", "round",
          "scalbln", "scalbn", "sin", "sinh", "sqrt", "tan", "tanh", "tgamma", "trunc", "rsqrt", "rcbrt", "sinpi",
          "cospi", "sincos", "sincospi", "erfinv", "erfcinv", "erfcx", "normcdf", "normcdfinv", "norm3d", "norm4d",
          "rhypot", "j0", "j1", "jn", "y0", "y1", "yn", "cyl_bessel_i0", "cyl_bessel_i1", "fdivide", "saturate"}) {
      out.emplace(math);
      out.insert(std::string(math) + "f");
      out.insert(std::string(math) + "l");
    }
    for (std::string_view function :
         {"abs", "labs", "llabs", "div", "ldiv", "lldiv", "isnan", "isinf", "isfinite", "isnormal", "signbit",
          "fpclassify", "isgreater", "isless", "min", "max", "malloc", "calloc", "realloc", "free", "aligned_alloc",
          "abort", "exit", "atexit", "quick_exit", "getenv", "system", "atoi", "atol", "atoll", "atof", "strtod",
          "strtof", "strtol", "strtoll", "strtoul", "strtoull", "rand", "srand", "qsort", "bsearch", "printf",
          "fprintf", "sprintf", "snprintf", "vprintf", "vfprintf", "vsnprintf", "puts", "putchar", "fputs", "fputc",
          "getchar", "fgets", "fgetc", "scanf", "sscanf", "fscanf", "fopen", "fclose", "fread", "fwrite", "fflush",
          "fseek", "ftell", "rewind", "remove", "rename", "tmpfile", "perror", "memcpy", "memmove", "memset", "memcmp",
          "memchr", "strlen", "strcpy", "strncpy", "strcat", "strncat", "strcmp", "strncmp", "strchr", "strrchr",
          "strstr", "strtok", "strdup", "strerror", "time", "clock", "difftime", "mktime", "localtime", "gmtime",
          "signal", "raise", "read", "write", "open", "close", "sleep", "usleep", "fork", "pipe", "dup", "kill",
          "getpid", "mmap", "munmap", "mprotect", "sysconf", "main", "errno", "environ", "stdin", "stdout", "stderr",
          "assert", "setjmp", "longjmp", "va_list"})
      out.emplace(function);
    return out;
  }();
  return names;
}

// CUDA's built-in variables, types and device functions, and the C and C++ types generated code uses.
const std::set<std::string_view>& cudaNames() {
  static const std::set<std::string_view> names = {
      "threadIdx", "blockIdx", "blockDim", "gridDim", "warpSize", "dim3", "uint3", "char1", "char2", "char4",
      "uchar1", "uchar2", "uchar4", "short2", "short4", "int1", "int2", "int3", "int4", "uint1", "uint2", "uint4",
      "long2", "long4", "longlong2", "longlong4", "ulonglong2", "float1", "float2", "float3", "float4", "double2",
      "double4", "half", "half2", "nv_bfloat16", "nv_bfloat162", "size_t", "ptrdiff_t", "intptr_t", "uintptr_t",
      "nullptr_t", "max_align_t", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t",
      "uint64_t", "std", "atomicAdd", "atomicSub", "atomicMax", "atomicMin", "atomicExch", "atomicCAS", "atomicAnd",
      "atomicOr", "atomicXor", "atomicInc", "atomicDec", "clock64", "printf", "make_uint4", "make_float4",
      "make_int4", "texture", "surface", "tex1Dfetch", "ucontext_t", "FILE", "fpos_t", "jmp_buf", "sig_atomic_t",
      "pthread_t", "off_t", "ssize_t", "pid_t", "wchar_t"};
  return names;
}

// Names the generated code itself declares or calls where a user's name is visible.
const std::set<std::string_view>& generatedNames() {
  static const std::set<std::string_view> names = {"stream", "error"};
  return names;
}

bool hasReservedPrefix(std::string_view name) {
  constexpr std::array<std::string_view, 6> prefixes = {"cuda", "CUDA", "CU", "NV_", "emmy_", "EMMY"};
  return std::any_of(prefixes.begin(), prefixes.end(), [&](std::string_view p) { return name.substr(0, p.size()) == p; });
}

Meaning meaningOf(std::string_view name) {
  if (name.find("__") != std::string_view::npos || name.empty() || name[0] == '_') return Meaning::None;
  if (keywords().count(name)) return Meaning::Keyword;
  if (headerMacros().count(name)) return Meaning::Macro;
  if (cLibrary().count(std::string(name))) return Meaning::CLibrary;
  if (cudaNames().count(name) || hasReservedPrefix(name)) return Meaning::Cuda;
  if (generatedNames().count(name)) return Meaning::Generated;
  return Meaning::None;
}

}  // namespace

bool isReservedInGeneratedCode(std::string_view name) { return meaningOf(name) != Meaning::None; }

std::optional<std::string> kernelNameProblem(std::string_view name) {
  switch (meaningOf(name)) {
    case Meaning::None:
    case Meaning::Generated: return std::nullopt;
    case Meaning::Keyword: return fmt::format("a kernel cannot be named '{}': it becomes a C function of the generated header, and '{}' is a C++ keyword", name, name);
    case Meaning::Macro: return fmt::format("a kernel cannot be named '{}': it becomes a C function of the generated header, and '{}' is a macro of the C or CUDA headers included there", name, name);
    case Meaning::CLibrary: return fmt::format("a kernel cannot be named '{}': it becomes a C function of the generated header, and a C library function of that name is declared there", name);
    case Meaning::Cuda: return fmt::format("a kernel cannot be named '{}': it becomes a C function of the generated header, and CUDA or Emmy's generated code already declares '{}' there", name, name);
  }
  return std::nullopt;
}

}  // namespace emmy
