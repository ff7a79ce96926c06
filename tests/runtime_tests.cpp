// runtime/: the GPU runtime of `emmy run` and `emmy bench`, as far as it can be checked without a GPU —
// the driver API's declarations against cuda.h and the toolkit's libcuda stub, the device probe's
// answer without a device, generated host functions compiled against emmy_cuda_host.h with their
// harness and run until they need the driver, the bench's arithmetic, and the PyTorch requests. On a
// machine with a GPU the same tests run the kernels for real and compare them with the evaluator.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <catch2/catch.hpp>

#include "backend/harness.h"
#include "backend/nvrtc.h"
#include "support/process.h"
#include "check/gpu.h"
#include "compiler/pipeline.h"
#include "runtime/device.h"
#include "runtime/emmy_cuda_driver.h"
#include "runtime/gpu_kernel.h"
#include "runtime/torch_gpu.h"
#include "support/diagnostics.h"
#include "test_kernels.h"

using namespace emmy;
namespace fs = std::filesystem;

namespace {

const fs::path kCudaHome = "/usr/local/cuda";

// The device when there is one; else an H200's numbers, so that everything up to the driver still runs.
runtime::CudaDevice deviceOrH200() {
  runtime::DeviceProbe probe = runtime::probeCudaDevice();
  if (probe.device) return *probe.device;
  runtime::CudaDevice h200;
  h200.name = "NVIDIA H200 (assumed)";
  h200.major = 9;
  h200.multiprocessors = 132;
  h200.smClockKHz = 1980000;
  h200.memoryClockKHz = 3201000;
  h200.busWidthBits = 6144;
  h200.l2Bytes = 60 << 20;
  return h200;
}


tensor::Kernel stdlibKernel(const std::string& module, const std::string& instance) {
  for (const tensor::Kernel& kernel : testing::kernelsOf(fs::path(EMMY_SOURCE_DIR) / "stdlib" / module))
    if (kernel.instanceName() == instance) return kernel;
  FAIL("no instance " << instance << " in " << module);
  return {};
}

}  // namespace

TEST_CASE("without a device, the probe gives the driver's reason and requireCudaDevice exits 3's message", "[runtime]") {
  runtime::DeviceProbe probe = runtime::probeCudaDevice();
  if (probe.device) {
    CHECK(probe.device->capability() >= 50);
    CHECK_FALSE(probe.device->name.empty());
    CHECK(probe.device->multiprocessors > 0);
    SUCCEED("a CUDA device is present: " << probe.device->describe());
    return;
  }
  CHECK_FALSE(probe.reason.empty());
  CHECK_THROWS_AS(runtime::requireCudaDevice(), runtime::NoCudaDevice);
  CHECK_THROWS_WITH(runtime::requireCudaDevice(), "no CUDA device found (" + probe.reason + ")");
  CHECK(kExitNoCudaDevice == 3);
}

TEST_CASE("every driver function Emmy loads is exported by the toolkit's libcuda stub", "[runtime]") {
  fs::path stub = kCudaHome / "lib64" / "stubs" / "libcuda.so";
  if (!fs::exists(stub)) {
    SUCCEED("skipped: no CUDA toolkit stub at " << stub);
    return;
  }
  void* library = dlopen(stub.c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(library != nullptr);
  for (const emmy_cuda::DriverSymbol& symbol : emmy_cuda::kDriverSymbols) {
    INFO(symbol.name);
    CHECK(dlsym(library, symbol.name) != nullptr);
  }
  dlclose(library);
}

TEST_CASE("the driver API declarations match cuda.h: every function's shape and place, every constant", "[runtime]") {
  if (!fs::exists(kCudaHome / "include" / "cuda.h")) {
    SUCCEED("skipped: no cuda.h in " << kCudaHome);
    return;
  }
  // The member types and places (loadDriver fills Driver in kDriverSymbols' order) are taken before
  // cuda.h is included: its macros rename some functions (_v2).
  std::string before, after;
  int k = 0;
  for (const emmy_cuda::DriverSymbol& symbol : emmy_cuda::kDriverSymbols) {
    before += fmt::format("using Declared{0} = decltype(emmy_cuda::Driver::{1});\n"
                          "static_assert(offsetof(emmy_cuda::Driver, {1}) == {0} * sizeof(void*), \"{1} is in its place\");\n",
                          k, symbol.name);
    after += fmt::format("static_assert(sameShape<Declared{}>(&::{}), \"{}\");\n", k, symbol.name, symbol.name);
    ++k;
  }
  for (const char* constant : {"CU_DEVICE_ATTRIBUTE_CLOCK_RATE", "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT",
                               "CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE", "CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH",
                               "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE", "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR",
                               "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", "CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED",
                               "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD", "CUDA_SUCCESS", "CUDA_ERROR_NOT_SUPPORTED"})
    after += fmt::format("static_assert((int)emmy_cuda::{0} == (int)::{0}, \"{0}\");\n", constant);
  std::string source = fmt::format(R"(#include <cstddef>
#include <type_traits>
#include "emmy_cuda_driver.h"
// Same return and parameter sizes and pointer-ness: the calling convention of the declaration.
template <typename T> constexpr bool same(bool pointer, size_t size) {{ return std::is_pointer_v<T> == pointer && sizeof(T) == size; }}
template <typename Ours, typename R, typename... A> constexpr bool sameShape(R (*)(A...)) {{
  return []<typename S, typename... B>(S (*)(B...)) {{
    if constexpr (sizeof...(A) != sizeof...(B)) return false;
    else return same<R>(std::is_pointer_v<S>, sizeof(S)) && (same<A>(std::is_pointer_v<B>, sizeof(B)) && ...);
  }}(Ours{{}});
}}
{}
#include <cuda.h>
{}
)",
                                   before, after);
  TemporaryFolder folder;
  std::ofstream(folder.path() / "check.cpp") << source;
  ProcessOutcome compiled =
      runProcess({harness::hostCompiler(), "-std=c++20", "-fsyntax-only", "-I", (fs::path(EMMY_SOURCE_DIR) / "runtime").string(),
                       "-I", (kCudaHome / "include").string(), "check.cpp"},
                      folder.path(), folder.path() / "log", std::chrono::seconds(120));
  INFO(compiled.output);
  CHECK((compiled.kind == ProcessOutcome::Kind::Exited && compiled.code == 0));
}

TEST_CASE("NVRTC compiles for the device's own architecture, or PTX of the newest one below it", "[runtime]") {
  runtime::ModuleTarget own = runtime::moduleTarget(90, {75, 80, 86, 89, 90});
  CHECK(own.arch == "sm_90");
  CHECK(own.cubin);
  runtime::ModuleTarget newer = runtime::moduleTarget(120, {75, 80, 90, 100});
  CHECK(newer.arch == "sm_100");
  CHECK_FALSE(newer.cubin);
  CHECK_THROWS_AS(runtime::moduleTarget(70, {75, 80}), runtime::NoCudaDevice);
}

TEST_CASE("the harness calls the host function with every argument, in the order of section 4", "[runtime]") {
  tensor::Kernel layernorm = stdlibKernel("nn.emmy", "layernorm_f32");
  harness::HarnessCall call = harness::harnessCall(layernorm);
  CHECK(call.call ==
        "layernorm_f32(in__x, in__w, in__b, out__y, scalar__eps, emmy_harness_arguments[4] /* N */, "
        "emmy_harness_arguments[5] /* D */, emmy_harness_stream)");
  CHECK_THAT(call.declarations, Catch::Contains("emmy_harness_read_host(\"arguments.bin\", 6 * sizeof(int64_t))"));
  CHECK_THAT(call.declarations, Catch::Contains("float* out__y = static_cast<float*>(emmy_harness_allocate(emmy_harness_arguments[3], 0xa5));"));
  CHECK(call.writes == "  emmy_harness_write(\"y.bin\", out__y, emmy_harness_arguments[3]);\n");
}

// The real thing: NVRTC for the device, the host function against emmy_cuda_host.h, the harness in a
// child process. Kernels with temporaries (mlp), scalars (layernorm, attention) and 16-bit types.
TEST_CASE("generated host functions compile against emmy_cuda_host.h and run on the GPU, or stop at the driver", "[runtime]") {
  std::string whyNot;
  if (!nvrtcAvailable(&whyNot)) {
    SUCCEED("skipped, NVRTC is not installed: " << whyNot);
    return;
  }
  runtime::DeviceProbe probe = runtime::probeCudaDevice();
  runtime::CudaDevice device = deviceOrH200();
  struct Case {
    const char* module;
    const char* instance;
    std::map<std::string, int64_t> sizes;
  };
  const Case cases[] = {
      {"nn.emmy", "softmax_f32", {{"N", 37}, {"D", 1000}}},
      {"nn.emmy", "layernorm_bf16", {{"N", 5}, {"D", 300}}},
      {"nn.emmy", "mlp_f16", {{"N", 9}, {"D", 40}, {"H", 70}}},
      {"linalg.emmy", "matmul_f32", {{"M", 65}, {"N", 33}, {"K", 70}}},
  };
  for (const Case& each : cases) {
    INFO(each.instance);
    tensor::Kernel kernel = stdlibKernel(each.module, each.instance);
    runtime::GpuKernel program(device, kernel, emitCudaFiles({lower(kernel, PipelineOptions{})}, each.module));
    CHECK(program.target().arch == device.arch());
    CHECK_THAT(program.compileCommand(), Catch::Contains("-DEMMY_HOST_ONLY -include"));
    if (probe.device) {
      testing::checkAgainstEvaluator(kernel, program, each.sizes, 7);
      runtime::GpuRun timed = program.run(testing::randomInputs(kernel, each.sizes, 7), runtime::Timing{2, 5, true});
      REQUIRE_FALSE(timed.failure);
      CHECK(timed.milliseconds.size() == 5);
      CHECK(timed.medianMilliseconds() > 0);
      continue;
    }
    // The harness starts, reads its module path and stops where it needs the driver, with the reason.
    KernelRun ran = program.run(testing::randomInputs(kernel, each.sizes, 7));
    REQUIRE(ran.failure);
    CHECK_THAT(*ran.failure, Catch::StartsWith("the program on the GPU exited with status 5:\nemmy runtime: "));
    CHECK_THAT(*ran.failure, Catch::Contains(probe.reason.substr(0, 20)));
  }
}

TEST_CASE("the bench's throughput: bytes and flops over the median time, against the device's own peak", "[runtime]") {
  runtime::CudaDevice h200;
  h200.major = 9;
  h200.multiprocessors = 132;
  h200.smClockKHz = 1980000;
  h200.memoryClockKHz = 3201000;
  h200.busWidthBits = 6144;
  CHECK(h200.peakBandwidth() == Approx(3.201e9 * 768 * 2));  // 4.92 TB/s
  CHECK(h200.peakFp32Flops() == Approx(132 * 1.98e9 * 128 * 2));  // 66.9 TFLOP/s
  runtime::CudaDevice a100 = h200;
  a100.major = 8;
  CHECK(a100.peakFp32Flops() == Approx(h200.peakFp32Flops() / 2));  // 64 FP32 lanes per SM on sm_80

  Work work{2.4e9, 6e10};
  Throughput measured = throughput(work, 1.0, h200);
  CHECK(measured.bytesPerSecond == Approx(2.4e12));
  CHECK(measured.flopsPerSecond == Approx(6e13));
  CHECK(measured.bandwidthFraction == Approx(2.4e12 / h200.peakBandwidth()));
  CHECK(measured.flopsFraction == Approx(6e13 / h200.peakFp32Flops()));
  CHECK(formatThroughput(work, measured) == "2.40 GB, 2.40 TB/s, 49% of peak; 60.00 GFLOP, 60.00 TFLOP/s, 90% of peak");

  runtime::CudaDevice unknown;  // a driver that reports no clocks: no fractions
  CHECK(formatThroughput(work, throughput(work, 1.0, unknown)) == "2.40 GB, 2.40 TB/s; 60.00 GFLOP, 60.00 TFLOP/s");
  CHECK(throughput(work, 0, h200).bytesPerSecond == 0);
}

TEST_CASE("the instance's work is the sum of its CUDA kernels' bytes and flops", "[runtime]") {
  tensor::Kernel matmul = stdlibKernel("linalg.emmy", "matmul_f32");
  Work work = instanceWork(lower(matmul, PipelineOptions{}), {{"M", 64}, {"N", 32}, {"K", 128}});
  CHECK(work.bytes == (64 * 128 + 128 * 32 + 64 * 32) * 4);
  CHECK(work.flops == 2.0 * 64 * 32 * 128);
}

TEST_CASE("PyTorch requests, results and command line", "[runtime]") {
  runtime::TorchRequest run;
  run.kernel = "layernorm";
  run.dtype = "bf16";
  run.sizes = {{"N", 5}, {"D", 300}};
  run.scalars = {{"eps", 1e-5}};
  run.params = {{"GROUPS", 2}};
  run.inputsDir = "/in";
  run.outputsDir = "/out";
  runtime::TorchRequest bench = run;
  bench.timing = {3, 20, true};
  CHECK(runtime::torchRequestsJson({run, bench}) ==
        R"([{"kernel":"layernorm","dtype":"bf16","sizes":{"D":300,"N":5},"scalars":{"eps":1e-05},"params":{"GROUPS":2},)"
        R"("mode":"run","inputs":"/in","outputs":"/out"},{"kernel":"layernorm","dtype":"bf16","sizes":{"D":300,"N":5},)"
        R"("scalars":{"eps":1e-05},"params":{"GROUPS":2},"mode":"bench","warmup":3,"repetitions":20,"flush_l2":true}])");

  runtime::TorchBatch parsed = runtime::parseTorchResults(
      R"({"torch":"2.11.0","device":"NVIDIA H200","results":[{"ok":true},{"ok":true,"median_ms":0.5,"min_ms":0.25},{"ok":false,"error":"boom"}]})",
      3);
  REQUIRE_FALSE(parsed.unavailable);
  CHECK(parsed.torchVersion == "2.11.0");
  CHECK(parsed.results[1].medianMilliseconds == 0.5);
  CHECK(parsed.results[1].minMilliseconds == 0.25);
  CHECK_FALSE(parsed.results[2].ok);
  CHECK(parsed.results[2].error == "boom");
  CHECK(runtime::parseTorchResults("not json", 1).unavailable);
  CHECK(runtime::parseTorchResults(R"({"results":[]})", 1).unavailable);

  testing::ScopedEnvironment python("EMMY_PYTHON", "/opt/python/bin/python3");
  std::vector<std::string> command = runtime::torchCommand("/tmp/r.json", "/tmp/o.json");
  REQUIRE(command.size() == 4);
  CHECK(command[0] == "/opt/python/bin/python3");
  CHECK(command[1] == (runtime::defaultRuntimeDir() / "torch_stdlib.py").string());
  CHECK(command[2] == "/tmp/r.json");
  CHECK(command[3] == "/tmp/o.json");
}

TEST_CASE("without python3 or PyTorch on the GPU, the comparison says why and nothing fails", "[runtime]") {
  runtime::TorchRequest request;
  request.kernel = "softmax";
  request.dtype = "f32";
  request.sizes = {{"N", 4}, {"D", 8}};
  request.timing = {1, 2, false};
  {
    testing::ScopedEnvironment python("EMMY_PYTHON", "/nonexistent/python3");
    runtime::TorchBatch batch = runtime::runTorch({request});
    REQUIRE(batch.unavailable);
    CHECK_THAT(*batch.unavailable, Catch::Contains("/nonexistent/python3"));
  }
  // The real script, with the python3 here: PyTorch with a device gives a timing, else the reason.
  runtime::TorchBatch batch = runtime::runTorch({request});
  if (batch.unavailable) {
    CHECK_THAT(*batch.unavailable, Catch::Contains("PyTorch"));
  } else {
    REQUIRE(batch.results.size() == 1);
    CHECK(batch.results[0].ok);
    CHECK(batch.results[0].medianMilliseconds > 0);
  }
}

TEST_CASE("the standard library's files are recognised wherever they are named from", "[runtime]") {
  CHECK(isStdlibFile((fs::path(EMMY_SOURCE_DIR) / "stdlib" / "nn.emmy").string()));
  CHECK(isStdlibFile((fs::path(EMMY_SOURCE_DIR) / "stdlib" / ".." / "stdlib" / "linalg.emmy").string()));
  CHECK_FALSE(isStdlibFile((fs::path(EMMY_SOURCE_DIR) / "examples" / "softmax.emmy").string()));
  CHECK_FALSE(isStdlibFile("/nonexistent/nn.emmy"));
}
