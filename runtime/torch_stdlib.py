#!/usr/bin/env python3
"""The standard library's kernels in PyTorch on the GPU, for `emmy run` and `emmy bench` (and bench/).

    python3 torch_stdlib.py REQUESTS.json RESULTS.json

REQUESTS.json is a list of requests, each one kernel instance:
    {"kernel": "layernorm", "dtype": "bf16", "sizes": {"N": 5, "D": 300}, "scalars": {"eps": 1e-5},
     "mode": "run", "inputs": DIR, "outputs": DIR}
        reads DIR/NAME.npy for every input and scalar, as `emmy check --inputs` does (bf16 as <u2 bit
        patterns), and writes every output as DIR/NAME.npy in the same format;
    {"kernel": "matmul", "dtype": "f32", "sizes": {"M": 4096, "N": 4096, "K": 4096}, "scalars": {},
     "mode": "bench", "warmup": 10, "repetitions": 100, "flush_l2": true}
        times the same work in PyTorch eager with CUDA events on random inputs (the median and the
        fastest of `repetitions` calls after `warmup`, each preceded, outside the events, by overwriting
        twice the L2 cache when `flush_l2`).
RESULTS.json gets {"torch": VERSION, "device": NAME, "results": [...]} with one object per request, in
order: {"ok": true} (run), {"ok": true, "median_ms": M, "min_ms": F} (bench), or {"ok": false, "error":
TEXT} (a kernel with no counterpart here among them).

Exit status: 0 with results written; 3 when PyTorch or a CUDA device is missing, with the reason on
standard output; 2 for a malformed request.
"""
import json
import sys

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
}


def compute(torch, kernel, t, s):
    """The kernel in PyTorch eager, as a user would write it (matrix products go to cuBLAS)."""
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
    if kernel in ("attention", "causal_attention"):
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
        result = compute(torch, request["kernel"], t, s)
    torch.cuda.synchronize()
    save_npy(torch, np, f"{request['outputs']}/{output}.npy", result)
    return {"ok": True}


def bench(torch, request):
    sizes = request["sizes"]
    t = {}
    for name, dims, dtype in input_types(torch, request):
        shape = [int(sizes[dim]) for dim in dims.split()]
        t[name] = (torch.rand(shape, device="cuda", dtype=torch.float32) * 2 - 1).to(dtype)
    s = scalars_of(request)
    flush = None
    if request.get("flush_l2"):
        flush = torch.empty(2 * torch.cuda.get_device_properties(0).L2_cache_size, dtype=torch.uint8, device="cuda")
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    with torch.no_grad():
        for k in range(request["warmup"] + request["repetitions"]):
            if flush is not None:
                flush.fill_(k & 0xFF)
            start.record()
            compute(torch, request["kernel"], t, s)
            stop.record()
            stop.synchronize()
            if k >= request["warmup"]:
                times.append(start.elapsed_time(stop))
    times.sort()
    middle = len(times) // 2
    median = times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2
    return {"ok": True, "median_ms": median, "min_ms": times[0]}


def main(argv):
    if len(argv) != 3:
        print("usage: torch_stdlib.py REQUESTS.json RESULTS.json")
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
    with open(argv[1]) as file:
        requests = json.load(file)
    results = []
    for request in requests:
        if request.get("mode") not in ("run", "bench"):
            print(f"malformed request: {request}")
            return 2
        if request.get("kernel") not in KERNELS:
            results.append({"ok": False, "error": f"no PyTorch counterpart for kernel {request.get('kernel')}"})
            continue
        try:
            results.append(run(torch, np, request) if request["mode"] == "run" else bench(torch, request))
        except Exception as error:  # one kernel's failure is its result, not the batch's
            results.append({"ok": False, "error": f"{type(error).__name__}: {error}"})
    with open(argv[2], "w") as file:
        json.dump({"torch": torch.__version__, "device": torch.cuda.get_device_name(0), "results": results}, file)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
