// The TorchScript importer through the real `emmy`: models built and saved with LibTorch, imported,
// checked in the CPU simulation of the generated CUDA on the same inputs as LibTorch ran them, and
// compared with LibTorch's results.
#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/script.h>
#include <torch/torch.h>
// LibTorch's logging defines glog's CHECK, which aborts the whole run on a failure; the tests mean
// Catch's, defined after it.
#undef CHECK
#include <catch2/catch.hpp>

#include "support/npy.h"
#include "support/process.h"

namespace fs = std::filesystem;
using namespace emmy;

namespace {

struct Run {
  int code = -1;
  std::string output;
};

Run runEmmy(const std::vector<std::string>& arguments, const fs::path& folder) {
  std::vector<std::string> argv = {EMMY_BINARY};
  argv.insert(argv.end(), arguments.begin(), arguments.end());
  ProcessOutcome outcome = runProcess(argv, folder, folder / "emmy.log", std::chrono::seconds(600));
  INFO(shellCommand(argv) << "\n" << outcome.output);
  REQUIRE(outcome.kind == ProcessOutcome::Kind::Exited);
  return {outcome.code, outcome.output};
}


// Floats as f32, integers (class indices) as i64.
void writeTensor(const fs::path& path, const torch::Tensor& tensor) {
  if (!tensor.is_floating_point()) {
    torch::Tensor dense = tensor.to(torch::kInt64).contiguous();
    Buffer buffer(DType::I64, std::vector<int64_t>(dense.sizes().begin(), dense.sizes().end()));
    std::memcpy(buffer.data(), dense.data_ptr<int64_t>(), buffer.byteSize());
    return writeNpy(path, buffer);
  }
  torch::Tensor dense = tensor.to(torch::kFloat32).contiguous();
  Buffer buffer(DType::F32, std::vector<int64_t>(dense.sizes().begin(), dense.sizes().end()));
  std::memcpy(buffer.data(), dense.data_ptr<float>(), buffer.byteSize());
  writeNpy(path, buffer);
}

// What LibTorch computed against what emmy check saved: integers (positions) exactly, floats with the f32
// tolerance of the spec.
void compare(const torch::Tensor& expected, const fs::path& saved) {
  INFO(saved.string());
  if (!expected.is_floating_point()) {
    Buffer actual = readNpy(saved, DType::I64);
    torch::Tensor dense = expected.to(torch::kInt64).contiguous();
    REQUIRE(std::vector<int64_t>(dense.sizes().begin(), dense.sizes().end()) == actual.shape());
    CHECK(std::memcmp(actual.data(), dense.data_ptr<int64_t>(), actual.byteSize()) == 0);
    return;
  }
  Buffer actual = readNpy(saved, DType::F32);
  torch::Tensor dense = expected.to(torch::kFloat32).contiguous();
  REQUIRE(std::vector<int64_t>(dense.sizes().begin(), dense.sizes().end()) == actual.shape());
  const float* want = dense.data_ptr<float>();
  const float* got = static_cast<const float*>(actual.data());
  double worst = 0;
  for (int64_t k = 0; k < actual.numel(); ++k)
    worst = std::max(worst, std::abs(static_cast<double>(got[k]) - want[k]) / (1e-4 * (1 + std::abs(want[k]))));
  CHECK(worst <= 1.0);
}

// A number argument of forward, a scalar parameter of the kernel: written as a rank-0 `.npy` of its type.
void writeNumber(const fs::path& path, const c10::IValue& number) {
  Buffer buffer(number.isDouble() ? DType::F32 : DType::I64, {});
  if (number.isDouble()) *static_cast<float*>(buffer.data()) = static_cast<float>(number.toDouble());
  else *static_cast<int64_t*>(buffer.data()) = number.toInt();
  writeNpy(path, buffer);
}

// A model, the arguments its forward takes (tensors and numbers), and the --input options that give their
// ranks to `emmy build`.
struct Model {
  torch::jit::Module module;
  std::vector<std::pair<std::string, c10::IValue>> inputs;
  std::vector<std::string> inputOptions;
};

class Scratch {
public:
  Scratch() { fs::create_directories(folder_.path()); }
  const fs::path& path() const { return folder_.path(); }

private:
  TemporaryFolder folder_;
};

// Saves the model, runs `emmy check` on it with the model's inputs and parameters as .npy files, and
// compares every output with LibTorch's; then imports it and builds both the .pt and the printed .emmy,
// which must give the same CUDA byte for byte.
void checkAgainstLibTorch(Model model, bool withInputOptionsForCheck = false) {
  Scratch scratch;
  fs::path dir = scratch.path();
  model.module.eval();
  model.module.save((dir / "model.pt").string());

  fs::create_directories(dir / "inputs");
  std::vector<c10::IValue> arguments;
  for (const auto& [name, value] : model.inputs) {
    if (value.isTensor()) writeTensor(dir / "inputs" / (name + ".npy"), value.toTensor());
    else writeNumber(dir / "inputs" / (name + ".npy"), value);
    arguments.push_back(value);
  }
  // Parameters, buffers and other tensor attributes become inputs named by their path.
  for (const auto& attribute : model.module.named_attributes(true)) {
    if (!attribute.value.isTensor()) continue;
    std::string name = attribute.name;
    std::replace(name.begin(), name.end(), '.', '_');
    writeTensor(dir / "inputs" / (name + ".npy"), attribute.value.toTensor());
  }
  c10::IValue result = model.module.forward(arguments);
  std::vector<torch::Tensor> expected;
  if (result.isTuple())
    for (const c10::IValue& element : result.toTuple()->elements()) expected.push_back(element.toTensor());
  else
    expected.push_back(result.toTensor());

  std::vector<std::string> check = {"check", "model.pt", "--inputs", "inputs", "--save", "out"};
  if (withInputOptionsForCheck)
    for (const std::string& option : model.inputOptions) check.insert(check.end(), {"--input", option});
  Run checked = runEmmy(check, dir);
  INFO(checked.output);
  REQUIRE(checked.code == 0);
  for (size_t k = 0; k < expected.size(); ++k)
    compare(expected[k], dir / "out" / (expected.size() == 1 ? std::string("out.npy") : "out" + std::to_string(k) + ".npy"));

  std::vector<std::string> inputOptions;
  for (const std::string& option : model.inputOptions) inputOptions.insert(inputOptions.end(), {"--input", option});
  auto with = [&](std::vector<std::string> arguments) {
    arguments.insert(arguments.end(), inputOptions.begin(), inputOptions.end());
    return arguments;
  };
  Run imported = runEmmy(with({"import", "model.pt", "-o", "printed/model.emmy"}), dir);
  INFO(imported.output);
  REQUIRE(imported.code == 0);
  INFO(readWholeFile(dir / "printed" / "model.emmy"));
  REQUIRE(runEmmy({"build", "printed/model.emmy", "-o", "from_source"}, dir).code == 0);
  REQUIRE(runEmmy(with({"build", "model.pt", "-o", "from_model"}), dir).code == 0);
  CHECK(readWholeFile(dir / "from_source" / "model.cu") == readWholeFile(dir / "from_model" / "model.cu"));
  CHECK(readWholeFile(dir / "from_source" / "model.h") == readWholeFile(dir / "from_model" / "model.h"));
  // The printed source is what `emmy import` writes to standard output as well.
  Run printed = runEmmy(with({"import", "model.pt"}), dir);
  CHECK(printed.output == readWholeFile(dir / "printed" / "model.emmy"));
}

torch::jit::Module linearModule(int64_t out, int64_t in, bool bias = true) {
  torch::jit::Module linear("Linear");
  linear.register_parameter("weight", torch::randn({out, in}) * 0.2, false);
  if (bias) linear.register_parameter("bias", torch::randn({out}) * 0.2, false);
  return linear;
}

// torch.jit.trace is Python; LibTorch's tracer is what it runs, with the module as `self` so that
// parameters are recorded as attributes, as trace_module does. `forward` becomes the module's forward,
// traced on `x`.
void addTracedForward(torch::jit::Module& module, const torch::Tensor& x,
                      const std::function<torch::jit::Stack(torch::jit::Stack)>& forward) {
  torch::NoGradGuard noGrad;
  auto traced = torch::jit::tracer::trace({x}, forward, [](const torch::autograd::Variable&) { return std::string(); },
                                          /*strict=*/true, /*force_outplace=*/false, &module, {"x"});
  auto function = module._ivalue()->compilation_unit()->create_function(
      c10::QualifiedName(*module.type()->name(), "forward"), traced.first->graph);
  module.type()->addMethod(function);
}

}  // namespace

TEST_CASE("importer: a two-layer MLP with GELU", "[importer]") {
  torch::manual_seed(1);
  Model model{torch::jit::Module("MLP"), {{"x", torch::randn({6, 16})}}, {"x=f32[B,16]"}};
  model.module.register_module("fc1", linearModule(32, 16));
  model.module.register_module("fc2", linearModule(16, 32));
  model.module.define(R"(
def forward(self, x):
    h = torch.linear(x, self.fc1.weight, self.fc1.bias)
    h = torch.gelu(h)
    return torch.linear(h, self.fc2.weight, self.fc2.bias)
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: a LayerNorm with a residual, eps from an attribute", "[importer]") {
  torch::manual_seed(2);
  Model model{torch::jit::Module("Block"), {{"x", torch::randn({2, 3, 24})}}, {"x=f32[B,S,24]"}};
  torch::jit::Module norm("LayerNorm");
  norm.register_parameter("weight", torch::randn({24}), false);
  norm.register_parameter("bias", torch::randn({24}), false);
  norm.register_attribute("eps", c10::FloatType::get(), 1e-5);
  model.module.register_module("norm", norm);
  model.module.define(R"(
def forward(self, x):
    return x + torch.layer_norm(x, [24], self.norm.weight, self.norm.bias, self.norm.eps)
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: an RMSNorm written with pow, mean and rsqrt", "[importer]") {
  torch::manual_seed(3);
  Model model{torch::jit::Module("RMSNorm"), {{"x", torch::randn({5, 32})}}, {"x=f32[N,32]"}};
  model.module.register_parameter("weight", torch::randn({32}), false);
  model.module.define(R"(
def forward(self, x):
    ms = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(ms + 1e-6) * self.weight
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: attention written by hand", "[importer]") {
  torch::manual_seed(4);
  Model model{torch::jit::Module("Attention"),
              {{"q", torch::randn({2, 2, 5, 8})}, {"k", torch::randn({2, 2, 7, 8})}, {"v", torch::randn({2, 2, 7, 8})}},
              {"q=f32[B,H,S,8]", "k=f32[B,H,L,8]", "v=f32[B,H,L,8]"}};
  model.module.define(R"(
def forward(self, q, k, v):
    scores = torch.matmul(q, k.transpose(-2, -1)) * q.size(-1) ** -0.5
    weights = torch.softmax(scores, dim=-1)
    return torch.matmul(weights, v)
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: scaled_dot_product_attention, plain and causal", "[importer]") {
  torch::manual_seed(5);
  for (bool causal : {false, true}) {
    DYNAMIC_SECTION("causal " << causal) {
      Model model{torch::jit::Module("SDPA"),
                  {{"q", torch::randn({2, 2, 6, 8})}, {"k", torch::randn({2, 2, 6, 8})}, {"v", torch::randn({2, 2, 6, 8})}},
                  {"q=f32[B,H,S,8]", "k=f32[B,H,S,8]", "v=f32[B,H,S,8]"}};
      model.module.define(std::string(R"(
def forward(self, q, k, v):
    out = torch._scaled_dot_product_attention(q, k, v, None, 0.0, False, )") + (causal ? "True" : "False") + R"()
    return out[0]
)");
      checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
    }
  }
}

TEST_CASE("importer: a SwiGLU block, weights without bias", "[importer]") {
  torch::manual_seed(6);
  Model model{torch::jit::Module("SwiGLU"), {{"x", torch::randn({4, 16})}}, {"x=f32[N,16]"}};
  model.module.register_module("w1", linearModule(24, 16, false));
  model.module.register_module("w3", linearModule(24, 16, false));
  model.module.register_module("w2", linearModule(16, 24, false));
  model.module.define(R"(
def forward(self, x):
    gate = torch.silu(torch.linear(x, self.w1.weight, None))
    up = torch.matmul(x, self.w3.weight.t())
    return torch.linear(gate * up, self.w2.weight, None), gate
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: rank-0 outputs, attributes and number arguments (losses, scales)", "[importer]") {
  torch::manual_seed(8);
  Model model{torch::jit::Module("Losses"),
              {{"x", torch::randn({5, 7})}, {"y", torch::randn({5, 7})}, {"alpha", 0.75}, {"shift", int64_t{3}}},
              {"x=f32[N,7]", "y=f32[N,7]"}};
  model.module.register_parameter("scale", torch::tensor(1.5), false);
  model.module.define(R"(
def forward(self, x, y, alpha: float, shift: int):
    loss = ((x - y) ** 2).mean()
    scaled = x * alpha + shift * self.scale
    return loss, scaled, x.sum() * self.scale + alpha * 2.0, torch.maximum(x.amax(), self.scale)
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: activations of torch.nn.functional, defaults and not", "[importer]") {
  torch::manual_seed(9);
  // Values far out on both sides: softplus's threshold, elu's exponential, hardswish's clamps.
  torch::Tensor x = torch::randn({4, 9}) * 8;
  Model model{torch::jit::Module("Activations"), {{"x", x}}, {"x=f32[N,9]"}};
  // torch.nn.functional is Python; what its functions call in a scripted model is these operators.
  model.module.define(R"(
def forward(self, x):
    a = torch.elu(x, 0.7) + torch.selu(x) + torch.celu(x, 1.3)
    b = torch.softplus(x) + torch.softplus(x, 2.0, 5.0) + torch.mish(x)
    c = torch.hardsigmoid(x) + torch.hardswish(x) + torch.log_sigmoid(x)
    return a, b, c, torch.relu6(x)
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: losses, with every reduction", "[importer]") {
  torch::manual_seed(10);
  torch::Tensor sign = torch::randint(0, 2, {6, 5}).to(torch::kFloat32) * 2 - 1;
  Model model{torch::jit::Module("Losses"),
              {{"x", torch::randn({6, 5})}, {"y", torch::randn({6, 5})}, {"sign", sign},
               {"p", torch::rand({6, 5})}, {"label", torch::tensor({0, 4, 2, 2, 1, 3})}, {"row", torch::randn({5})},
               {"cls", torch::tensor(int64_t{3})}},
              {"x=f32[N,5]", "y=f32[N,5]", "sign=f32[N,5]", "p=f32[N,5]", "label=i64[N]", "row=f32[5]", "cls=i64[]"}};
  // What torch.nn.functional's losses call in a scripted model (reduction 0 none, 1 mean, 2 sum;
  // 'batchmean' is a sum divided in Python).
  model.module.define(R"(
def forward(self, x, y, sign, p, label, row, cls):
    a = torch.mse_loss(x, y, 1) + torch.l1_loss(x, y, 2) + torch.smooth_l1_loss(x, y, 1, 0.5) + torch.huber_loss(x, y, 1, 0.8)
    b = torch.kl_div(torch.log_softmax(x, -1), p, 2, log_target=False) / x.size(0) + torch.kl_div(x, y, 2, log_target=True)
    q = torch.sigmoid(x)
    c = torch.binary_cross_entropy(q, p, None, 1) + torch.binary_cross_entropy_with_logits(x, p, None, None, 2)
    d = torch.hinge_embedding_loss(x, sign, 0.5, 1) + torch.soft_margin_loss(x, sign, 1)
    e = torch.cross_entropy_loss(x, label, None, 1, -100, 0.0) + torch.nll_loss(torch.log_softmax(y, 1), label, None, 2, -100)
    f = torch.cross_entropy_loss(x, label, None, 1, 2, 0.0) + torch.cross_entropy_loss(x, p, None, 1, -100, 0.0)
    g = torch.cross_entropy_loss(row, cls, None, 1, -100, 0.0)
    return a, b, c, d, e, f, g, torch.mse_loss(x, y, 0), torch.cross_entropy_loss(x, label, None, 0, -100, 0.0)
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: scans, logsumexp, arg-reductions and max/min in their three forms", "[importer]") {
  torch::manual_seed(11);
  Model model{torch::jit::Module("Scans"), {{"x", torch::randn({4, 6, 5}) * 0.5}}, {"x=f32[A,B,5]"}};
  model.module.define(R"(
def forward(self, x):
    values, positions = torch.max(x, 1)
    low, where = torch.min(x, -1, True)
    return (torch.cumsum(x, 1), torch.cumprod(x + 1.0, -1), torch.logsumexp(x, [0, 2]), torch.logsumexp(x, [1], True),
            torch.argmax(x, 2), torch.argmin(x, 0, True), torch.argmax(x), values, positions, low, where,
            torch.max(x), torch.min(x, x * 2.0))
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: BatchNorm as nn.BatchNorm2d scripts it, group_norm and instance_norm", "[importer]") {
  torch::manual_seed(12);
  Model model{torch::jit::Module("Norms"), {{"x", torch::randn({2, 4, 3, 5})}}, {"x=f32[N,4,H,W]"}};
  torch::jit::Module& module = model.module;
  module.register_parameter("weight", torch::randn({4}), false);
  module.register_parameter("bias", torch::randn({4}), false);
  // Optional, as nn.BatchNorm declares them: `is None` is then a question for the import, not the script.
  auto optionalTensor = c10::OptionalType::create(c10::TensorType::get());
  module.register_attribute("running_mean", optionalTensor, torch::randn({4}), false, true);
  module.register_attribute("running_var", optionalTensor, torch::rand({4}) + 0.5, false, true);
  module.register_attribute("momentum", c10::OptionalType::create(c10::FloatType::get()), 0.1);
  module.register_attribute("training", c10::BoolType::get(), true);  // what nn.Module has; eval() clears it
  module.register_parameter("group_weight", torch::randn({4}), false);
  module.register_parameter("group_bias", torch::randn({4}), false);
  module.define(R"(
def forward(self, x):
    assert x.dim() == 4, "expected 4D input"
    momentum = self.momentum
    if momentum is None:
        factor = 0.0
    else:
        factor = momentum
    if self.training:
        bn_training = True
    else:
        bn_training = (self.running_mean is None) and (self.running_var is None)
    mean = self.running_mean if not self.training else None
    var = self.running_var if not self.training else None
    y = torch.batch_norm(x, self.weight, self.bias, mean, var, bn_training, factor, 1e-5, False)
    g = torch.group_norm(x, 2, self.group_weight, self.group_bias, 1e-5, False)
    i = torch.instance_norm(x, None, None, None, None, True, 0.1, 1e-5, False)
    return y, g, i
)");
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: views in index form (select, slice, narrow, flip, tril, triu, .T) and norms", "[importer]") {
  torch::manual_seed(13);
  Model model{torch::jit::Module("Views"), {{"x", torch::randn({3, 6, 5})}, {"m", torch::randn({5, 5})}},
              {"x=f32[B,6,5]", "m=f32[5,5]"}};
  model.module.define(R"(
def forward(self, x, m):
    a = x[:, 2] + x[:, -1] + x.select(1, 0)
    b = x[:, 1:5:2, :-1] * 2.0
    c = torch.narrow(x, 2, 1, 3) + torch.flip(x, [0, 2])[:, :, 1:4]
    d = torch.tril(m) + torch.triu(m, 1) * 3.0 + torch.tril(m, -2) + m.T
    e = torch.norm(x, 2, [2]) + torch.frobenius_norm(x, [1, 2], True).squeeze(-1).squeeze(-1).unsqueeze(1)
    f = torch.linalg_vector_norm(x, 1.0, [0], False) + torch.linalg_vector_norm(x, 3.0, [0], False)
    return a, b, c, d, e, f, torch.norm(m)
)");
  // Dims sliced must be known: a slice of a dim only known at run time has a length no size names.
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: cat, stack, constant_pad_nd and reciprocal, square, log1p, expm1, sign", "[importer]") {
  torch::manual_seed(14);
  Model model{torch::jit::Module("Joins"), {{"x", torch::randn({5, 3})}, {"y", torch::randn({5, 4})}},
              {"x=f32[N,3]", "y=f32[N,4]"}};
  model.module.define(R"(
def forward(self, x, y):
    a = torch.cat([x, y * 2.0], 1)
    b = torch.stack([x, x + 1.0], 0)
    c = torch.constant_pad_nd(x, [1, 2], 0.5) + torch.constant_pad_nd(y, [3, -1], 0.0)
    d = torch.reciprocal(x + 3.0) + torch.square(x) + torch.log1p(torch.abs(x)) + torch.expm1(x) + torch.sign(x)
    e = torch.cat([x, x * 3.0], 0).sum(0)
    return a, b, c, d, e
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: einsum (products, batches, implicit outputs, diagonals, rank 0) and roll", "[importer]") {
  torch::manual_seed(19);
  Model model{torch::jit::Module("Einsum"),
              {{"a", torch::randn({3, 4})}, {"b", torch::randn({4, 5})}, {"c", torch::randn({5, 2})}, {"v", torch::randn({6})},
               {"sq", torch::randn({4, 4})}, {"x", torch::randn({2, 3, 4})}, {"y", torch::randn({2, 4, 5})}},
              {"a=f32[I,J]", "b=f32[J,K]", "c=f32[5,2]", "v=f32[V]", "sq=f32[4,4]", "x=f32[B,I,J]", "y=f32[B,J,K]"}};
  model.module.define(R"(
def forward(self, a, b, c, v, sq, x, y):
    mm = torch.einsum("ij,jk->ik", [a, b])
    batched = torch.einsum("bij , bjk -> bik", [x, y])
    dot = torch.einsum("i,i->", [v, v])
    outer = torch.einsum("i,j", [v, c[0]])
    trace = torch.einsum("ii", [sq])
    diagonal = torch.einsum("ii->i", [sq])
    chain = torch.einsum("ij,jk,kl->il", [a, b, c])
    transposed = torch.einsum("ij->ji", [a])
    return mm, batched, dot, outer, trace, diagonal, chain, transposed, torch.roll(sq, [1, -5], [0, 1]), torch.roll(c, 7, 0)
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: split, chunk, broadcast_tensors, repeat, any and all", "[importer]") {
  torch::manual_seed(20);
  Model model{torch::jit::Module("Splits"), {{"x", torch::randn({3, 7})}, {"m", torch::randn({1, 7}).gt(0).to(torch::kFloat32)}},
              {"x=f32[N,7]", "m=f32[1,7]"}};
  model.module.define(R"(
def forward(self, x, m):
    a, b, c = torch.chunk(x, 3, 1)
    p, q = torch.split(x, [2, 5], 1)
    r = torch.split(x, 4, 1)[1]
    u, w = torch.broadcast_tensors(x, m)
    repeated = x.repeat([2, 1, 3])
    anything = torch.any(x > 0.5).float()
    everything = torch.all(x > -1.0, 1).float()
    rows = torch.any(m, 0, True).float()
    return a, b, c + 1.0, p, q, r, u * w, repeated, anything, everything, rows, torch.all(m).float()
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: triplet_margin_loss, pairwise_distance, cosine_similarity and `in` of sizes known when imported", "[importer]") {
  torch::manual_seed(21);
  Model model{torch::jit::Module("Distances"),
              {{"a", torch::randn({4, 6})}, {"p", torch::randn({4, 6})}, {"n", torch::randn({4, 6})}}, {"a=f32[N,6]", "p=f32[N,6]", "n=f32[N,6]"}};
  model.module.define(R"(
def forward(self, a, p, n):
    swap = a.size(1) in [6, 8]
    plain = torch.triplet_margin_loss(a, p, n, 0.5, 2.0, 1e-6, False, 1)
    swapped = torch.triplet_margin_loss(a, p, n, 1.0, 1.0, 1e-6, swap, 0)
    distance = torch.pairwise_distance(a, n, 3.0, 1e-6, True)
    cosine = torch.cosine_similarity(a, p, 1, 1e-8)
    if a.size(1) in [5, 7]:
        cosine = cosine * 2.0
    return plain, swapped, distance, cosine
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: convolutions (1d, 2d, 3d; stride, padding, dilation, groups, bias, 'same')", "[importer]") {
  torch::manual_seed(15);
  Model model{torch::jit::Module("Convolutions"),
              {{"x", torch::randn({2, 4, 9, 7})}, {"s", torch::randn({2, 3, 11})}, {"v", torch::randn({1, 2, 5, 6, 4})}},
              {"x=f32[N,4,9,7]", "s=f32[N,3,11]", "v=f32[M,2,5,6,4]"}};
  torch::jit::Module& module = model.module;
  module.register_parameter("w", torch::randn({6, 4, 3, 3}) * 0.3, false);
  module.register_parameter("b", torch::randn({6}), false);
  module.register_parameter("grouped", torch::randn({6, 2, 3, 2}) * 0.3, false);
  module.register_parameter("w1", torch::randn({5, 3, 4}) * 0.3, false);
  module.register_parameter("b1", torch::randn({5}), false);
  module.register_parameter("w3", torch::randn({3, 2, 2, 3, 2}) * 0.3, false);
  module.define(R"(
def forward(self, x, s, v):
    a = torch.conv2d(x, self.w, self.b, [2, 1], [1, 2], [1, 2], 1)
    g = torch.conv2d(x, self.grouped, None, 2, 0, 1, 2)
    same = torch.conv2d(torch.relu(x), self.w, None, 1, "same", 2, 1)
    one = torch.conv1d(s, self.w1, self.b1, 3, 2, 1, 1)
    three = torch.conv3d(v, self.w3, None, [1, 2, 1], [1, 0, 1], 1, 1)
    unbatched = torch.conv1d(s[0], self.w1, None, 1, 0, 2, 1)
    return a, g, same, one, three, unbatched
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: convolutions of 16 channels and more run as implicit GEMMs, grouped and transposed ones too", "[importer]") {
  torch::manual_seed(27);
  Model model{torch::jit::Module("WideConvolutions"), {{"x", torch::randn({2, 32, 9, 7})}}, {"x=f32[N,32,9,7]"}};
  torch::jit::Module& module = model.module;
  module.register_parameter("w", torch::randn({48, 32, 3, 3}) * 0.1, false);
  module.register_parameter("b", torch::randn({48}), false);
  module.register_parameter("grouped", torch::randn({32, 16, 3, 2}) * 0.1, false);
  module.register_parameter("up", torch::randn({32, 24, 3, 3}) * 0.1, false);
  module.define(R"(
def forward(self, x):
    a = torch.conv2d(x, self.w, self.b, 1, 1, 1, 1)
    g = torch.conv2d(x, self.grouped, None, [2, 1], [0, 1], 1, 2)
    u = torch.conv_transpose2d(x, self.up, None, 2, 1, 1, 1, 1)
    return a, g, u
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
  Scratch scratch;
  model.module.save((scratch.path() / "model.pt").string());
  Run schedule = runEmmy({"build", "model.pt", "--input", "x=f32[N,32,9,7]", "--emit", "schedule"}, scratch.path());
  INFO(schedule.output);
  REQUIRE(schedule.code == 0);
  size_t products = 0;
  for (size_t at = schedule.output.find("mma "); at != std::string::npos; at = schedule.output.find("mma ", at + 1)) ++products;
  CHECK(products == 3);
}

TEST_CASE("importer: transposed convolutions (stride, padding, output_padding, groups, dilation)", "[importer]") {
  torch::manual_seed(16);
  Model model{torch::jit::Module("Transposed"),
              {{"x", torch::randn({2, 4, 5, 6})}, {"s", torch::randn({2, 3, 7})}, {"v", torch::randn({1, 2, 3, 4, 3})}},
              {"x=f32[N,4,5,6]", "s=f32[N,3,7]", "v=f32[1,2,3,4,3]"}};
  torch::jit::Module& module = model.module;
  module.register_parameter("w", torch::randn({4, 3, 3, 2}) * 0.3, false);
  module.register_parameter("b", torch::randn({6}), false);
  module.register_parameter("w1", torch::randn({3, 5, 4}) * 0.3, false);
  module.register_parameter("w3", torch::randn({2, 3, 2, 3, 2}) * 0.3, false);
  module.register_parameter("b3", torch::randn({3}), false);
  module.define(R"(
def forward(self, x, s, v):
    a = torch.conv_transpose2d(x, self.w, self.b, [2, 3], [1, 0], [1, 2], 2, [1, 2])
    one = torch.conv_transpose1d(s, self.w1, None, 3, 2, 1, 1, 1)
    plain = torch.conv_transpose1d(s, self.w1, None, 1, 0, 0, 1, 2)
    three = torch.conv_transpose3d(v, self.w3, self.b3, 2, [0, 1, 1], [1, 0, 1], 1, 1)
    return a, one, plain, three
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: max, average and adaptive pools (padding, ceil_mode, count_include_pad, divisor)", "[importer]") {
  torch::manual_seed(17);
  Model model{torch::jit::Module("Pools"),
              {{"x", torch::randn({2, 3, 9, 8})}, {"s", torch::randn({2, 3, 10})}, {"v", torch::randn({1, 2, 5, 7, 6})}},
              {"x=f32[N,C,9,8]", "s=f32[N,3,10]", "v=f32[1,2,5,7,6]"}};
  model.module.define(R"(
def forward(self, x, s, v):
    m2 = torch.max_pool2d(x, [3, 2], [2, 2], [1, 1], [1, 2], True)
    m1 = torch.max_pool1d(s, [3], [2], [1], [1], False)
    m3 = torch.max_pool3d(v, [2, 3, 2], [2, 2, 2], [1, 1, 0], [1, 1, 1], True)
    a2 = torch.avg_pool2d(x, [3, 3], [2, 2], [1, 1], True, False)
    a2pad = torch.avg_pool2d(x, [3, 2], [2, 3], [1, 1], True, True)
    a2div = torch.avg_pool2d(x, [2, 2], [2, 2], [0, 0], False, True, 3)
    a1 = torch.avg_pool1d(s, [4], [3], [2], True, False)
    a3 = torch.avg_pool3d(v, [3, 3, 2], [1, 2, 2], [1, 0, 1], False, True)
    g = torch.adaptive_avg_pool2d(x, [1, 1])
    uneven = torch.adaptive_avg_pool2d(x, [4, 3])
    g1 = torch.adaptive_avg_pool1d(s, [3])
    g3 = torch.adaptive_avg_pool3d(v, [5, 2, 4])
    top, where = torch.adaptive_max_pool2d(x, [2, 3])
    return m2, m1, m3, a2, a2pad, a2div, a1, a3, g, uneven, g1, g3, top
)");
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

// What torch.jit.trace records for nn.Conv2d: aten::_convolution with every argument.
TEST_CASE("importer: a traced convolution (aten::_convolution), plain and transposed", "[importer]") {
  torch::manual_seed(18);
  torch::Tensor x = torch::randn({2, 3, 7, 6});
  Model model{torch::jit::Module("TracedConvolution"), {{"x", x}}, {"x=f32[N,3,7,6]"}};
  model.module.register_parameter("weight", torch::randn({4, 3, 3, 3}) * 0.3, false);
  model.module.register_parameter("bias", torch::randn({4}), false);
  model.module.register_parameter("up", torch::randn({4, 2, 2, 2}) * 0.3, false);
  torch::jit::Module& module = model.module;
  auto forward = [&](torch::jit::Stack inputs) -> torch::jit::Stack {
    torch::Tensor input = inputs[0].toTensor();
    torch::Tensor h = torch::_convolution(input, module.attr("weight").toTensor(), module.attr("bias").toTensor(), {2, 1}, {1, 1},
                                          {1, 1}, false, {0, 0}, 1, false, false, true, true);
    torch::Tensor up = torch::_convolution(torch::relu(h), module.attr("up").toTensor(), {}, {2, 2}, {0, 1}, {1, 1}, true,
                                           {1, 0}, 2, false, false, true, true);
    return {torch::max_pool2d(up, {2, 2}, {2, 2}, {0, 0}, {1, 1}, true)};
  };
  addTracedForward(module, x, forward);
  checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
}

TEST_CASE("importer: a traced module", "[importer]") {
  torch::manual_seed(7);
  torch::Tensor x = torch::randn({3, 12});
  Model model{torch::jit::Module("Traced"), {{"x", x}}, {"x=f32[N,12]"}};
  model.module.register_parameter("weight", torch::randn({10, 12}) * 0.3, false);
  model.module.register_parameter("bias", torch::randn({10}), false);
  torch::jit::Module& module = model.module;
  auto forward = [&](torch::jit::Stack inputs) -> torch::jit::Stack {
    torch::Tensor input = inputs[0].toTensor();
    torch::Tensor h = torch::addmm(module.attr("bias").toTensor(), input, module.attr("weight").toTensor().t());
    return {torch::tanh(h) * 2 - torch::sigmoid(h)};
  };
  addTracedForward(module, x, forward);
  checkAgainstLibTorch(model);
}

TEST_CASE("importer: an unsupported operation names itself and its source line", "[importer]") {
  Scratch scratch;
  torch::jit::Module module("Sorts");
  module.define(R"(
def forward(self, x):
    y = torch.exp(x)
    return torch.sort(y, -1)[0]
)");
  module.save((scratch.path() / "model.pt").string());
  Run run = runEmmy({"import", "model.pt", "--input", "x=f32[N,8]", "-o", "model.emmy"}, scratch.path());
  CHECK(run.code == 1);
  CHECK_THAT(run.output, Catch::Contains("error: unsupported operation aten::sort"));
  CHECK_THAT(run.output, Catch::Contains("torch.sort(y, -1)"));
  CHECK_FALSE(fs::exists(scratch.path() / "model.emmy"));
  Run build = runEmmy({"build", "model.pt", "--input", "x=f32[N,8]", "-o", "out"}, scratch.path());
  CHECK(build.code == 1);
  CHECK_THAT(build.output, Catch::Contains("unsupported operation aten::sort"));
  CHECK_FALSE(fs::exists(scratch.path() / "out"));
}

// Code forward calls (PyTorch's nn.functional, a module's own forward) is inlined: an operation there is
// reported at forward's call, its own line a note.
TEST_CASE("importer: an unsupported operation in code forward calls is reported at the call, its line a note", "[importer]") {
  Scratch scratch;
  torch::jit::Module module("Calls");
  module.define(R"(
def helper(self, x):
    y = x * 2.0
    return torch.sort(y, -1)[0]

def middle(self, x):
    return self.helper(x) + 1.0

def forward(self, x):
    z = torch.exp(x)
    return self.middle(z)
)");
  module.save((scratch.path() / "model.pt").string());
  Run run = runEmmy({"import", "model.pt", "--input", "x=f32[N,8]"}, scratch.path());
  CHECK(run.code == 1);
  CHECK_THAT(run.output, Catch::Contains(":11:12: error: unsupported operation aten::sort\n"
                                         "    return self.middle(z)\n"));
  CHECK_THAT(run.output, Catch::Contains(":4:12: note: where the code it calls does it\n"
                                         "    return torch.sort(y, -1)[0]\n"));
}

TEST_CASE("importer: windows over spatial dims known only at run time, at two sizes", "[importer]") {
  // The output dims are the language's dimension expressions ((H + 2 - 3)/2 + 1, ceil_mode's min(..)),
  // which the launcher computes from the input's: one import serves every size.
  const char* forward = R"(
def forward(self, x, s):
    a = torch.conv2d(x, self.w, self.b, [2, 1], [1, 2], [1, 2], 1)
    g = torch.conv2d(x, self.grouped, None, 2, 0, 1, 3)
    t = torch.conv_transpose2d(x, self.wt, None, [2, 3], [1, 0], [1, 2], 1, [1, 2])
    m = torch.max_pool2d(x, [3, 2], [2, 2], [1, 1], [1, 2], False)
    mc = torch.max_pool2d(x, [2, 2], [3, 3], [1, 1], [1, 1], True)
    ac = torch.avg_pool2d(x, [3, 2], [2, 3], [1, 1], True, True)
    av = torch.avg_pool2d(x, [3, 3], [2, 2], [1, 1], False, False)
    avpad = torch.avg_pool2d(x, [3, 2], [2, 3], [1, 1], False, True)
    one = torch.conv1d(s, self.w1, None, 3, 2, 1, 1)
    pool = torch.avg_pool1d(s, [4], [3], [2], False, False) * 2.0
    return a, g, t, m, mc, ac, av, avpad, one, pool
)";
  int64_t seed = 30;
  for (auto [h, w, l] : {std::tuple{9, 7, 11}, std::tuple{14, 5, 16}}) {
    torch::manual_seed(seed++);
    Model model{torch::jit::Module("Windows"),
                {{"x", torch::randn({2, 6, h, w})}, {"s", torch::randn({2, 3, l})}},
                {"x=f32[N,6,H,W]", "s=f32[N,3,L]"}};
    model.module.register_parameter("w", torch::randn({4, 6, 3, 3}) * 0.3, false);
    model.module.register_parameter("b", torch::randn({4}), false);
    model.module.register_parameter("grouped", torch::randn({6, 2, 3, 2}) * 0.3, false);
    model.module.register_parameter("wt", torch::randn({6, 2, 3, 2}) * 0.3, false);
    model.module.register_parameter("w1", torch::randn({5, 3, 4}) * 0.3, false);
    model.module.define(forward);
    checkAgainstLibTorch(model, /*withInputOptionsForCheck=*/true);
  }
}

TEST_CASE("importer: what needs spatial dims known when imported, and a window larger than its input", "[importer]") {
  Scratch scratch;
  torch::jit::Module module("Windows");
  module.define(R"(
def forward(self, x, y):
    g = torch.adaptive_avg_pool2d(x, [2, 2])
    b = torch.max_pool1d(y, [5], [1], [0], [1], False)
    return g, b
)");
  module.save((scratch.path() / "model.pt").string());
  Run run = runEmmy({"import", "model.pt", "--input", "x=f32[N,3,H,W]", "--input", "y=f32[2,4]"}, scratch.path());
  CHECK(run.code == 1);
  CHECK_THAT(run.output, Catch::Contains("error: adaptive_avg_pool2d needs the spatial dims of its input known when the model "
                                         "is imported, not H: give them with --input"));
  CHECK_THAT(run.output, Catch::Contains("error: max_pool1d: spatial dim 0 of size 4 is too small for the window"));
}

TEST_CASE("importer: a corrupt model and a file that is no model are clear errors", "[importer]") {
  Scratch scratch;
  torch::jit::Module module("Small");
  module.define("def forward(self, x):\n    return x + 1\n");
  module.save((scratch.path() / "good.pt").string());
  std::string bytes = readWholeFile(scratch.path() / "good.pt");
  std::ofstream(scratch.path() / "corrupt.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  std::ofstream(scratch.path() / "text.pt") << "kernel f(x: f32[N]) -> (y: f32[N]) {\n    y = x\n}\n";
  for (const char* name : {"corrupt.pt", "text.pt"}) {
    Run run = runEmmy({"import", name}, scratch.path());
    INFO(name << ": " << run.output);
    CHECK(run.code == 1);
    CHECK_THAT(run.output, Catch::Contains(std::string(name) + ": error: not a TorchScript model"));
  }
  Run missing = runEmmy({"check", "missing.pt"}, scratch.path());
  CHECK(missing.code == 1);
  CHECK_THAT(missing.output, Catch::Contains("missing.pt: error: cannot read the file"));
}

// A parameter named like the output or like a size given with --input gives way (spec section 6: `_1`).
TEST_CASE("importer: parameters named like the output or a size given with --input", "[importer]") {
  Scratch scratch;
  torch::jit::Module module("Clash");
  module.register_parameter("out", torch::randn({4}), false);
  module.register_parameter("B", torch::randn({4}), false);
  module.define("def forward(self, x):\n    return x * self.out + self.B\n");
  module.save((scratch.path() / "model.pt").string());
  Run imported = runEmmy({"import", "model.pt", "--input", "x=f32[B,4]", "-o", "model.emmy"}, scratch.path());
  INFO(imported.output);
  REQUIRE(imported.code == 0);
  std::string source = readWholeFile(scratch.path() / "model.emmy");
  INFO(source);
  CHECK_THAT(source, Catch::Contains("kernel forward(x: f32[B, 4], out_1: f32[4], B_1: f32[4]) -> (out: f32[B, 4])"));
  CHECK(runEmmy({"build", "model.emmy", "-o", "built"}, scratch.path()).code == 0);
  Run checked = runEmmy({"check", "model.pt", "--input", "x=f32[B,4]", "--size", "B=3"}, scratch.path());
  INFO(checked.output);
  CHECK(checked.code == 0);

  Run clash = runEmmy({"import", "model.pt", "--input", "x=f32[x,4]"}, scratch.path());
  CHECK(clash.code == 2);
  CHECK_THAT(clash.output, Catch::Contains("--input x: the size name x is also the name of an argument of forward"));
}
