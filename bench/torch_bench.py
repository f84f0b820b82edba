"""The PyTorch side of the training-step benchmark (bench/step_bench.h is Loom's).

The same models as Loom's (the twins of its zoo registry, models/torch_models.py:
--models takes any registry name), the same settings (SGD lr 0.01 momentum 0.9
weight decay 5e-4, four input sets resident on the GPU, x randn, y randint over
the classes, per pixel for a segmentation model) and the same timing: the first step timed
with the wall clock from model construction (synchronised), warm-up, then the
median of R repeats of S steps timed with CUDA events. Writes the JSON lines of
bench/summary.h with "framework": "torch" and one of four modes:

  eager         plain PyTorch
  compile       torch.compile(step)
  max-autotune  torch.compile(step, mode="max-autotune")
  graph         the whole step (forward, loss, backward, SGD step) captured once in a
                CUDA graph with static input buffers, as PyTorch's documentation shows for
                whole-network capture; each step copies its batch into the static buffers,
                zeroes the gradients with one foreach call and replays the graph

Each record also carries the model's training FLOPs per image (forward convolution
and linear FLOPs counted from the layer shapes, times 3 for forward, data gradient
and weight gradient), so compare.py can print TFLOP/s and the share of the peak.

  python3 torch_bench.py --json torch.jsonl [--models lenet5 --batches 128 ...]
  python3 torch_bench.py --models none --tta /path/to/fashion-mnist --json tta.jsonl

Precisions: tf32 (cudnn and matmul TF32 on, as Loom's Tf32 policy uses TF32
for both convolutions and GEMMs), strict (both off), bf16 (autocast bf16, TF32
for what stays fp32). Layout auto: channels-last for tf32 and bf16 (in tf32 at
batch 512 PyTorch's CUDA-graph step ran up to 2.3x faster channels-last than
NCHW on an H200), NCHW for strict (not timed channels-last; its resnet9 step
ran cuDNN's FFT and Winograd kernels, which take NCHW).
"""
import argparse, gc, gzip, json, os, statistics, sys, time, traceback
import torch, torch.nn as nn, torch.nn.functional as F

# --- models: the twins of Loom's zoo (models/torch_models.py; in the GPU bundle beside this file) ----

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "models")]
import torch_models  # noqa: E402

MODELS = torch_models.ZOO
DEFAULT_MODELS = ["lenet5", "mnist_net", "resnet9"]
PRECISIONS = ("tf32", "strict", "bf16")
MODES = ("eager", "compile", "max-autotune", "graph")
INPUT_SETS = 4

# --- FLOPs from the layer shapes ----------------------------------------------------------

def forward_flops_per_image(model, shape):
    """Multiply-adds of every Conv2d, ConvTranspose2d and Linear, as 2 FLOPs each, for one image
    (attention's two matmuls are left out)."""
    total = 0
    def conv(m, inputs, out):
        nonlocal total
        k = m.in_channels // m.groups * m.kernel_size[0] * m.kernel_size[1]
        total += 2 * k * out[0].numel()
    def conv_transpose(m, inputs, out):
        nonlocal total
        total += 2 * m.out_channels // m.groups * m.kernel_size[0] * m.kernel_size[1] * inputs[0][0].numel()
    def linear(m, inputs, out):
        nonlocal total
        total += 2 * m.in_features * out[0].numel()
    def hook(m):
        return conv if isinstance(m, nn.Conv2d) else conv_transpose if isinstance(m, nn.ConvTranspose2d) else linear
    hooks = [m.register_forward_hook(hook(m))
             for m in model.modules() if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear))]
    with torch.no_grad():
        model(torch.zeros(1, *shape))
    for h in hooks:
        h.remove()
    return total

def train_flops_per_image(model_name):
    row = MODELS[model_name]
    return 3 * forward_flops_per_image(row.build(row.num_classes).eval(), row.input)

# --- one configuration ----------------------------------------------------------------------

def set_precision(precision):
    tf32 = precision != "strict"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32

def make_step(model, opt, bf16):
    def step(x, y):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step

def make_graph_step(model, opt, bf16, x0, y0, warmup=3):
    """The whole step captured in one CUDA graph; returns run(x, y), which replays it."""
    static_x, static_y = x0.clone(), y0.clone()
    eager = make_step(model, opt, bf16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream (cuDNN/cuBLAS handles, optimizer state)
        for _ in range(warmup):
            eager(static_x, static_y)
    torch.cuda.current_stream().wait_stream(side)
    grads = [p.grad for p in model.parameters()]
    graph = torch.cuda.CUDAGraph()
    torch._foreach_zero_(grads)
    with torch.cuda.graph(graph):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(static_x), static_y)
        loss.backward()
        opt.step()
    def run(x, y):
        static_x.copy_(x)
        static_y.copy_(y)
        torch._foreach_zero_(grads)
        graph.replay()
        return loss
    return run

def run_config(model_name, batch, precision, mode, layout, a):
    row = MODELS[model_name]
    shape = row.input
    target = (batch, *row.input[1:]) if row.per_pixel else (batch,)
    set_precision(precision)
    torch._dynamo.reset()  # a fresh compile per configuration (and no recompile limit)
    # The last configuration's graph pool and closures can outlive it in reference
    # cycles; what still stays allocated is subtracted, so each peak is this one's.
    # cuBLAS's workspaces (one per handle and stream, kept across empty_cache) are
    # dropped first: left in place they were subtracted from every configuration
    # after the process's first, which paid them alone (92-120 MiB for vit_tiny
    # and resnet20 at batch 512 with torch.compile, H200), while Loom's count its own.
    if hasattr(torch._C, "_cuda_clearCublasWorkspaces"):
        torch._C._cuda_clearCublasWorkspaces()
    gc.collect()
    torch.cuda.synchronize(); torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    base_bytes, base_reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    torch.manual_seed(0)
    t0 = time.perf_counter()
    model = row.build(row.num_classes).cuda()
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator(device="cuda").manual_seed(1)
    xs = [torch.randn(batch, *shape, device="cuda", generator=gen).contiguous(memory_format=fmt) for _ in range(INPUT_SETS)]
    ys = [torch.randint(0, row.num_classes, target, device="cuda", generator=gen) for _ in range(INPUT_SETS)]
    bf16 = precision == "bf16"
    if mode == "graph":
        fn = make_graph_step(model, opt, bf16, xs[0], ys[0])
    else:
        fn = make_step(model, opt, bf16)
    if mode == "compile":
        fn = torch.compile(fn)
    elif mode == "max-autotune":
        fn = torch.compile(fn, mode="max-autotune")
    i = 0
    def run():
        nonlocal i
        fn(xs[i % INPUT_SETS], ys[i % INPUT_SETS]); i += 1
    run(); torch.cuda.synchronize()
    first_step_s = time.perf_counter() - t0
    warmup = max(a.warmup, a.compile_warmup) if mode in ("compile", "max-autotune") else a.warmup
    for _ in range(warmup):
        run()
    # The first steps' peak, then the timed steps' own memory held from the driver, from an
    # emptied cache and one untimed step (bench/summary.h: steady_peak_bytes).
    torch.cuda.synchronize()
    first_peak = torch.cuda.max_memory_allocated() - base_bytes
    torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    repeat_ms = []
    # The CUDA profiler's range covers the timed steps only, as bench_train_step's does, so that
    # `ncu --profile-from-start off` times the same steady-state kernels on both sides.
    torch.cuda.profiler.start()
    for _ in range(a.repeats):
        start.record()
        for _ in range(a.steps):
            run()
        end.record(); end.synchronize()
        repeat_ms.append(start.elapsed_time(end) / a.steps)
    torch.cuda.profiler.stop()
    ms = statistics.median(repeat_ms)
    steady_peak = torch.cuda.max_memory_reserved() - base_reserved
    peak = max(first_peak, torch.cuda.max_memory_allocated() - base_bytes)
    return {"framework": "torch", "kind": "step", "model": model_name, "batch": batch,
            "precision": precision, "mode": mode, "layout": layout, "device": "cuda:0",
            "steps": a.steps, "repeats": a.repeats, "warmup": warmup, "ms_per_step": ms,
            "img_per_s": batch * 1e3 / ms, "first_step_s": first_step_s, "peak_bytes": peak,
            "peak_mib": peak / 2**20, "steady_peak_bytes": steady_peak, "steady_peak_mib": steady_peak / 2**20,
            "repeat_ms": repeat_ms, "fallback_reason": "",
            "train_flop_per_image": train_flops_per_image(model_name)}

# --- Fashion-MNIST time to accuracy ----------------------------------------------------------

def load_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)

def images(root, name):
    return load_idx(f"{root}/{name}").float().div(255).sub(0.2860).div(0.3530).unsqueeze(1).cuda()

def time_to_accuracy(root, target=0.91, batch=128, max_epochs=15):
    """mnist_net, Adam 1e-3, batch 128, tf32; the clock starts before the files are read."""
    set_precision("tf32")
    torch.cuda.synchronize(); t0 = time.perf_counter()
    xtr, xte = images(root, "train-images-idx3-ubyte.gz"), images(root, "t10k-images-idx3-ubyte.gz")
    ytr = load_idx(f"{root}/train-labels-idx1-ubyte.gz").long().cuda()
    yte = load_idx(f"{root}/t10k-labels-idx1-ubyte.gz").long().cuda()
    torch.manual_seed(0)
    model = torch_models.mnist_net().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    accuracies, seconds = [], 0.0
    for epoch in range(max_epochs):
        model.train()
        perm = torch.randperm(xtr.shape[0], device="cuda")
        for i in range(0, xtr.shape[0], batch):
            idx = perm[i:i + batch]
            loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
        model.eval()
        with torch.no_grad():
            accuracies.append((model(xte).argmax(1) == yte).float().mean().item())
        seconds = time.perf_counter() - t0
        print(f"tta epoch={epoch + 1} test_acc={accuracies[-1]:.4f} elapsed_s={seconds:.2f}", flush=True)
        if accuracies[-1] >= target:
            break
    return {"framework": "torch", "kind": "tta", "target": target, "reached": accuracies[-1] >= target,
            "epochs": len(accuracies), "seconds": seconds, "wall_seconds": seconds,
            "accuracy": accuracies[-1], "accuracies": accuracies}

# --- main ---------------------------------------------------------------------------------------

def csv_list(known=None, convert=str):
    """"a,b" -> [a, b] ("none" -> []), each converted and, where `known` is given, checked."""
    def parse(text):
        items = [] if text == "none" else [convert(s) for s in text.split(",") if s]
        for item in items:
            if known is not None and item not in known:
                raise argparse.ArgumentTypeError(f"unknown value '{item}' (one of: {', '.join(known)})")
        return items
    return parse

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=csv_list(MODELS), default=DEFAULT_MODELS)
    ap.add_argument("--batches", type=csv_list(convert=int), default=[128, 512])
    ap.add_argument("--precisions", type=csv_list(PRECISIONS), default=list(PRECISIONS))
    ap.add_argument("--modes", type=csv_list(MODES), default=list(MODES))
    ap.add_argument("--layout", choices=("auto", "nchw", "nhwc"), default="auto")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--compile-warmup", type=int, default=20, help="warm-up steps under torch.compile (recompiles settle)")
    ap.add_argument("--json", default="", help="append one JSON object per configuration")
    ap.add_argument("--tta", default="", help="Fashion-MNIST folder (IDX .gz): time to 91%% test accuracy")
    return ap.parse_args(argv)

def emit(record, path):
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")

def main(argv):
    a = parse_args(argv)
    torch.backends.cudnn.benchmark = True
    print(f"torch {torch.__version__} cudnn {torch.backends.cudnn.version()} gpu {torch.cuda.get_device_name()}", flush=True)
    status = 0
    for model in a.models:
        print(f"{model}: {train_flops_per_image(model) / 1e9:.4f} GFLOP per image per training step "
              "(3x the forward convolution and linear FLOPs)", flush=True)
        for batch in a.batches:
            for precision in a.precisions:
                layout = a.layout if a.layout != "auto" else ("nchw" if precision == "strict" else "nhwc")
                for mode in a.modes:
                    try:
                        r = run_config(model, batch, precision, mode, layout, a)
                        print(f"{model:10s} batch {batch:4d}  {precision:6s} {mode:7s} {layout:4s} {r['img_per_s']:12.0f} img/s "
                              f"{r['ms_per_step']:9.3f} ms/step  first step {r['first_step_s']:6.2f} s  peak {r['peak_mib']:8.1f} MiB "
                              f"(timed steps {r['steady_peak_mib']:.1f})", flush=True)
                    except Exception as e:  # one failing configuration (a compile error) must not hide the rest
                        traceback.print_exc()
                        r = {"framework": "torch", "kind": "step", "model": model, "batch": batch, "precision": precision,
                             "mode": mode, "layout": layout, "error": f"{type(e).__name__}: {e}"}
                        status = 1
                    emit(r, a.json)
    if a.tta:
        r = time_to_accuracy(a.tta)
        print(f"Fashion-MNIST time to 91%: {'reached' if r['reached'] else 'NOT reached'} after {r['epochs']} epochs, {r['seconds']:.2f} s", flush=True)
        emit(r, a.json)
    return status

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
