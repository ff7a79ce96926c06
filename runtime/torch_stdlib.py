#!/usr/bin/env python3
"""The standard library's kernels in PyTorch on the GPU, for `emmy run` and `emmy bench` (and bench/).

    python3 torch_stdlib.py REQUESTS.json RESULTS.json     # a batch
    python3 torch_stdlib.py --serve                          # a session, on the socket at file descriptor 3

Each request is one JSON object:
    {"kernel": "layernorm", "dtype": "bf16", "sizes": {"N": 5, "D": 300}, "scalars": {"eps": 1e-5},
     "params": {}, "mode": "run", "inputs": DIR, "outputs": DIR}
        ("params": the instance's integer arguments, as conv2d's {"stride": 2, "STRIDE_H": 2, "GROUPS": 1, ...})
        reads DIR/NAME.npy for every input and scalar, as `emmy check --inputs` does (bf16 as <u2 bit
        patterns), and writes every output as DIR/NAME.npy in the same format;
    {"kernel": "matmul", "dtype": "f32", "sizes": {"M": 4096, "N": 4096, "K": 4096}, "scalars": {},
     "mode": "bench", "warmup": 10, "repetitions": 100, "flush_l2": true, "compile_seconds": 30}
        times the same work in PyTorch eager with CUDA events on random inputs (the median and the
        fastest of `repetitions` calls after `warmup`, each preceded, outside the events, by overwriting
        twice the L2 cache when `flush_l2`), then the baselines that apply to the kernel, timed alike:
        "torch.compile" when `compile_seconds` is given (a compilation that takes longer is abandoned),
        "cublas" for the products (their matrix products alone, through torch.matmul), and
        "flash-attention" for the attentions (SDPA held to its FlashAttention-2 backend), whose result
        also names the backend SDPA picks by itself ("sdpa_backend");
    {"mode": "copy", "bytes": B, "warmup": 3, "repetitions": 10, "flush_l2": true}
        times a copy of B bytes from one tensor to another (`copy_`: cudaMemcpy device to device);
    {"mode": "clocks"}
        reads the SM and memory clocks now.
Results, in order, one object per request: {"ok": true} (run); {"ok": true, "median_ms": M, "min_ms": F,
"clocks": {"sm_mhz": S, "memory_mhz": R}} (bench and copy; bench adds "baselines": [{"name": ..., "ok":
true, "median_ms": ...}, {"name": ..., "ok": false, "skipped": WHY}, ...] and "sdpa_backend"); {"ok":
true, "clocks": ...} (clocks); {"ok": false, "error": TEXT} (a kernel with no counterpart here among
them). The clocks are NVML's, read right after the timed calls, and missing where NVML is.

A batch writes {"torch": VERSION, "device": NAME, "results": [...]} to RESULTS.json. A session (for
`emmy bench`, which times PyTorch on each kernel right after Emmy's code, importing torch only once)
reads one request per line from the socket and answers each with one line, after a first line
{"torch": VERSION, "device": NAME}; library messages go to standard output and error. It ends at the
end of its requests, and with the process that started it.

Exit status: 0 when done; 3 when PyTorch or a CUDA device is missing, with the reason on standard output;
2 for a malformed request.
"""
import json
import signal
import socket
import sys
import time

# Every kernel of stdlib/nn.emmy and stdlib/linalg.emmy: its inputs with their dims (size names), its
# output, and the defaults of its scalars. An input of a fixed dtype says so; the others are of T.
KERNELS = {
    "softmax": ([("x", "N D")], "y", {}),
    "log_softmax": ([("x", "N D")], "y", {}),
    "layernorm": ([("x", "N D"), ("w", "D"), ("b", "D")], "y", {"eps": 1e-5}),
    "rmsnorm": ([("x", "N D"), ("g", "D")], "y", {"eps": 1e-6}),
    "linear": ([("x", "N IN"), ("w", "OUT IN"), ("b", "OUT")], "y", {}),
    "mlp": ([("x", "N D"), ("w1", "H D"), ("b1", "H"), ("w2", "D H"), ("b2", "D")], "y", {}),
    "attention": ([("q", "B H S E"), ("k", "B H L E"), ("v", "B H L E")], "o", {}),
    "causal_attention": ([("q", "B H S E"), ("k", "B H S E"), ("v", "B H S E")], "o", {}),
    "attend": ([("logits", "B H S L", "f32"), ("v", "B H L E")], "o", {}),
    "matmul": ([("a", "M K"), ("b", "K N")], "c", {}),
    "bmm": ([("a", "B M K"), ("b", "B K N")], "c", {}),
    "transpose": ([("x", "M N")], "y", {}),
    "conv1d": ([("x", "N C L"), ("w", "OUT C//GROUPS K"), ("b", "OUT")], "y", {}),
    "conv2d": ([("x", "N C H W"), ("w", "OUT C//GROUPS KH KW"), ("b", "OUT")], "y", {}),
    "conv3d": ([("x", "N C D H W"), ("w", "OUT C//GROUPS KD KH KW"), ("b", "OUT")], "y", {}),
    "conv_transpose1d": ([("x", "N C L"), ("w", "C OUT//GROUPS K"), ("b", "OUT")], "y", {}),
    "conv_transpose2d": ([("x", "N C H W"), ("w", "C OUT//GROUPS KH KW"), ("b", "OUT")], "y", {}),
    "conv_transpose3d": ([("x", "N C D H W"), ("w", "C OUT//GROUPS KD KH KW"), ("b", "OUT")], "y", {}),
    "max_pool1d": ([("x", "N C L")], "y", {}),
    "max_pool2d": ([("x", "N C H W")], "y", {}),
    "max_pool3d": ([("x", "N C D H W")], "y", {}),
    "avg_pool1d": ([("x", "N C L")], "y", {}),
    "avg_pool2d": ([("x", "N C H W")], "y", {}),
    "avg_pool3d": ([("x", "N C D H W")], "y", {}),
    "batchnorm": ([("x", "N C H W"), ("mean", "C"), ("var", "C"), ("w", "C"), ("b", "C")], "y", {"eps": 1e-5}),
    "groupnorm": ([("x", "N C H W"), ("w", "C"), ("b", "C")], "y", {"eps": 1e-5}),
    "instancenorm": ([("x", "N C H W")], "y", {"eps": 1e-5}),
}

# The windows' integer arguments, per spatial dim: the stdlib names one value for every dim (STRIDE) and
# one for each (STRIDE_D, STRIDE_H, STRIDE_W), the latter set from the former by default.
SPATIAL_SUFFIXES = {1: ("",), 2: ("_H", "_W"), 3: ("_D", "_H", "_W")}


def per_dim(p, name, rank):
    return tuple(p[name + suffix] for suffix in SPATIAL_SUFFIXES[rank])

# The matrix products of each product kernel alone, through torch.matmul (cuBLAS): the library speed the
# performance targets hold Emmy's products to.
PRODUCTS = {
    "matmul": lambda torch, t: torch.matmul(t["a"], t["b"]),
    "bmm": lambda torch, t: torch.matmul(t["a"], t["b"]),
    "linear": lambda torch, t: torch.matmul(t["x"], t["w"].t()),
    "mlp": lambda torch, t: torch.matmul(torch.matmul(t["x"], t["w1"].t()), t["w2"].t()),
}

ATTENTIONS = ("attention", "causal_attention")

# The operator each SDPA backend runs as, as the profiler names it.
SDPA_OPERATORS = {
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
}


def compute(torch, kernel, t, s, p):
    """The kernel in PyTorch eager, as a user would write it (matrix products go to cuBLAS); `p` holds the
    instance's integer arguments."""
    F = torch.nn.functional
    if kernel == "softmax":
        return torch.softmax(t["x"], -1)
    if kernel == "log_softmax":
        return torch.log_softmax(t["x"], -1)
    if kernel == "layernorm":
        return F.layer_norm(t["x"], (t["x"].shape[-1],), t["w"], t["b"], s["eps"])
    if kernel == "rmsnorm":
        return F.rms_norm(t["x"], (t["x"].shape[-1],), t["g"], s["eps"])
    if kernel == "linear":
        return F.linear(t["x"], t["w"], t["b"])
    if kernel == "mlp":
        return F.linear(F.gelu(F.linear(t["x"], t["w1"], t["b1"])), t["w2"], t["b2"])
    if kernel in ATTENTIONS:
        return F.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=kernel == "causal_attention",
                                              scale=s["scale"])
    if kernel == "attend":
        return (torch.softmax(t["logits"], -1) @ t["v"].float()).to(t["v"].dtype)
    if kernel == "matmul":
        return torch.matmul(t["a"], t["b"])
    if kernel == "bmm":
        return torch.bmm(t["a"], t["b"])
    if kernel == "transpose":
        return t["x"].t().contiguous()
    rank = t["x"].dim() - 2
    if kernel.startswith("conv_transpose"):
        return getattr(F, kernel)(t["x"], t["w"], t["b"], stride=per_dim(p, "STRIDE", rank),
                                  padding=per_dim(p, "PAD", rank), output_padding=per_dim(p, "OUTPUT_PADDING", rank),
                                  groups=p["GROUPS"], dilation=per_dim(p, "DILATION", rank))
    if kernel.startswith("conv"):
        return getattr(F, kernel)(t["x"], t["w"], t["b"], stride=per_dim(p, "STRIDE", rank),
                                  padding=per_dim(p, "PAD", rank), dilation=per_dim(p, "DILATION", rank),
                                  groups=p["GROUPS"])
    if kernel.startswith("max_pool"):
        return getattr(F, kernel)(t["x"], per_dim(p, "KERNEL", rank), stride=per_dim(p, "STRIDE", rank),
                                  padding=per_dim(p, "PAD", rank), dilation=per_dim(p, "DILATION", rank),
                                  ceil_mode=p["CEIL"] != 0)
    if kernel.startswith("avg_pool"):
        return getattr(F, kernel)(t["x"], per_dim(p, "KERNEL", rank), stride=per_dim(p, "STRIDE", rank),
                                  padding=per_dim(p, "PAD", rank), ceil_mode=p["CEIL"] != 0,
                                  count_include_pad=p["count_include_pad"] != 0)
    if kernel == "batchnorm":
        return F.batch_norm(t["x"], t["mean"], t["var"], t["w"], t["b"], training=False, eps=s["eps"])
    if kernel == "groupnorm":
        return F.group_norm(t["x"], p["GROUPS"], t["w"], t["b"], s["eps"])
    if kernel == "instancenorm":
        return F.instance_norm(t["x"], eps=s["eps"])
    raise KeyError(kernel)


def torch_dtype(torch, name):
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]


def load_npy(torch, np, path, dtype):
    array = np.load(path)
    if dtype == torch.bfloat16:  # bit patterns, <u2
        return torch.from_numpy(array.astype(np.uint16).view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy()).to(dtype)


def save_npy(torch, np, path, tensor):
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        np.save(path, tensor.view(torch.int16).numpy().view(np.uint16))
    else:
        np.save(path, tensor.numpy())


def input_types(torch, request):
    """Every input's name, dims and torch dtype: T, or the fixed dtype the table gives."""
    element = torch_dtype(torch, request["dtype"])
    for parameter in KERNELS[request["kernel"]][0]:
        yield parameter[0], parameter[1], torch_dtype(torch, parameter[2]) if len(parameter) > 2 else element


def params_of(request):
    return request.get("params", {})


def scalars_of(request):
    values = dict(KERNELS[request["kernel"]][2])
    values.update(request.get("scalars", {}))
    return values


def run(torch, np, request):
    output = KERNELS[request["kernel"]][1]
    folder = request["inputs"]
    t = {name: load_npy(torch, np, f"{folder}/{name}.npy", dtype).cuda() for name, _, dtype in input_types(torch, request)}
    s = scalars_of(request)
    for name in list(s):
        try:
            s[name] = float(np.load(f"{folder}/{name}.npy"))
        except FileNotFoundError:
            pass
    with torch.no_grad():
        result = compute(torch, request["kernel"], t, s, params_of(request))
    torch.cuda.synchronize()
    save_npy(torch, np, f"{request['outputs']}/{output}.npy", result)
    return {"ok": True}


class Clocks:
    """The device's SM and memory clocks through NVML (nvidia-ml-py), when it is there."""

    def __init__(self, torch):
        try:
            import pynvml
            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(0).uuid)
            handles = [pynvml.nvmlDeviceGetHandleByIndex(k) for k in range(pynvml.nvmlDeviceGetCount())]
            # NVML numbers the devices its own way: find torch's device 0 by its UUID ("GPU-" + torch's).
            self.handle = next(h for h in handles if self._text(pynvml.nvmlDeviceGetUUID(h)).endswith(uuid))
            self.pynvml = pynvml
        except Exception:  # no NVML here: results go without clocks
            self.pynvml = None

    @staticmethod
    def _text(value):
        return value.decode() if isinstance(value, bytes) else value

    def now(self):
        if self.pynvml is None:
            return {}
        read = self.pynvml.nvmlDeviceGetClockInfo
        return {"clocks": {"sm_mhz": read(self.handle, self.pynvml.NVML_CLOCK_SM),
                           "memory_mhz": read(self.handle, self.pynvml.NVML_CLOCK_MEM)}}


def time_calls(torch, clocks, call, request):
    """The median and the fastest of the timed calls of `call`, as the request's timing asks, and the
    clocks right after them."""
    flush = None
    if request.get("flush_l2"):
        flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for k in range(request["warmup"] + request["repetitions"]):
        if flush is not None:
            flush.fill_(k & 0xFF)
        start.record()
        call()
        stop.record()
        stop.synchronize()
        if k >= request["warmup"]:
            times.append(start.elapsed_time(stop))
    times.sort()
    middle = len(times) // 2
    median = times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
    return {"median_ms": median, "min_ms": times[0], **clocks.now()}


class CompileTimeout(BaseException):
    """Not an Exception, so that no library's `except Exception` on the way up turns it into its own error."""


def on_alarm(signum, frame):
    raise CompileTimeout()


def compiled(torch, clocks, request, t, s):
    """torch.compile of the kernel, its first call (the compilation) given `compile_seconds` at most; the
    result says how long the compilation took, whatever became of it."""
    kernel, seconds = request["kernel"], request["compile_seconds"]
    # Afresh for each kernel: every kernel is traced through compute()'s one code object, and past
    # dynamo's recompile limit on it the rest would run eager, unannounced.
    torch._dynamo.reset()
    params = params_of(request)
    function = torch.compile(lambda tensors: compute(torch, kernel, tensors, s, params), fullgraph=True, dynamic=False)
    started = time.monotonic()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        function(t)
        torch.cuda.synchronize()
    except CompileTimeout:
        torch._dynamo.reset()
        return {"ok": False, "skipped": f"not compiled within {seconds} s", "compile_s": time.monotonic() - started}
    except Exception as error:
        return {"ok": False, "error": f"{type(error).__name__}: {error}", "compile_s": time.monotonic() - started}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    compile_seconds = time.monotonic() - started
    return {"ok": True, "compile_s": compile_seconds, **time_calls(torch, clocks, lambda: function(t), request)}


def sdpa_backend(torch, request, t, s):
    """The backend SDPA picks for these inputs, by the operator the profiler sees it run."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        compute(torch, request["kernel"], t, s, params_of(request))
        torch.cuda.synchronize()
    ran = {event.name for event in profile.events()}
    return next((backend for operator, backend in SDPA_OPERATORS.items() if operator in ran), "unknown")


def flash_attention(torch, clocks, request, t, s):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            compute(torch, request["kernel"], t, s, params_of(request))
        except RuntimeError as error:  # no FlashAttention kernel for these inputs (f32, say)
            return {"ok": False, "skipped": f"FlashAttention-2 does not run these inputs ({error})"}
        return {"ok": True, **time_calls(torch, clocks, lambda: compute(torch, request["kernel"], t, s, params_of(request)), request)}


def baseline(name, measure):
    """One baseline's result, named; its failure is its result, not the request's."""
    try:
        return {"name": name, **measure()}
    except Exception as error:
        return {"name": name, "ok": False, "error": f"{type(error).__name__}: {error}"}


def bench(torch, clocks, request):
    kernel = request["kernel"]
    sizes = request["sizes"]
    t = {}
    for name, dims, dtype in input_types(torch, request):
        # Each dim is a size, or an expression of sizes and integer arguments (C//GROUPS).
        shape = [int(eval(dim, {"__builtins__": {}}, {**sizes, **params_of(request)})) for dim in dims.split()]
        t[name] = (torch.rand(shape, device="cuda", dtype=torch.float32) * 2 - 1).to(dtype)
    s = scalars_of(request)
    with torch.no_grad():
        result = {"ok": True, **time_calls(torch, clocks, lambda: compute(torch, kernel, t, s, params_of(request)), request)}
        baselines = []
        if request.get("compile_seconds"):
            baselines.append(baseline("torch.compile", lambda: compiled(torch, clocks, request, t, s)))
        if kernel in PRODUCTS:
            baselines.append(baseline("cublas", lambda: {"ok": True, **time_calls(torch, clocks, lambda: PRODUCTS[kernel](torch, t), request)}))
        if kernel in ATTENTIONS:
            result["sdpa_backend"] = sdpa_backend(torch, request, t, s)
            baselines.append(baseline("flash-attention", lambda: flash_attention(torch, clocks, request, t, s)))
    if baselines:
        result["baselines"] = baselines
    return result


def copy(torch, clocks, request):
    source = torch.rand(request["bytes"] // 4, device="cuda")
    target = torch.empty_like(source)
    result = {"ok": True, **time_calls(torch, clocks, lambda: target.copy_(source), request)}
    if not torch.equal(target, source):
        return {"ok": False, "error": "the copy differs from its source"}
    return result


def answer(torch, np, clocks, request):
    """The result of one request; None for a malformed one."""
    mode = request.get("mode")
    if mode not in ("run", "bench", "copy", "clocks"):
        return None
    if mode in ("run", "bench") and request.get("kernel") not in KERNELS:
        return {"ok": False, "error": f"no PyTorch counterpart for kernel {request.get('kernel')}"}
    try:
        if mode == "clocks":
            return {"ok": True, **clocks.now()}
        if mode == "copy":
            return copy(torch, clocks, request)
        return run(torch, np, request) if mode == "run" else bench(torch, clocks, request)
    except Exception as error:  # one request's failure is its result, not the batch's
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def serve(torch, np, clocks):
    """Answers the requests on the socket at file descriptor 3, one line each, until it closes."""
    try:  # end with the process that started this one, even one killed before it could close the socket
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    channel = socket.socket(fileno=3)
    lines, out = channel.makefile("r"), channel.makefile("w")

    def send(value):
        out.write(json.dumps(value) + "\n")
        out.flush()

    send({"torch": torch.__version__, "device": torch.cuda.get_device_name(0)})
    for line in lines:
        request = json.loads(line)
        result = answer(torch, np, clocks, request)
        if result is None:
            print(f"malformed request: {request}")
            return 2
        send(result)
        torch.cuda.empty_cache()  # what this request held is for the next Emmy run
    return 0


def main(argv):
    session = argv[1:] == ["--serve"]
    if len(argv) != 3 and not session:
        print("usage: torch_stdlib.py REQUESTS.json RESULTS.json, or torch_stdlib.py --serve")
        return 2
    try:
        import numpy as np
        import torch
    except ImportError as error:
        print(f"PyTorch is not installed for {sys.executable} ({error})")
        return 3
    if not torch.cuda.is_available():
        print(f"PyTorch {torch.__version__} sees no CUDA device")
        return 3
    # Like for like: FP32 matrix products in FP32, not TF32.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    clocks = Clocks(torch)
    if session:
        return serve(torch, np, clocks)
    with open(argv[1]) as file:
        requests = json.load(file)
    results = []
    for request in requests:
        result = answer(torch, np, clocks, request)
        if result is None:
            print(f"malformed request: {request}")
            return 2
        results.append(result)
    with open(argv[2], "w") as file:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "results": results}, file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
