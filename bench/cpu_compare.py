"""Loom vs PyTorch on the CPU: training steps of every model of the zoo (models/registry.h: the
reference models lenet5, mnist_net, resnet9, then the zoo) at batch 8 and 64, NCHW and
channels-last, with the same thread count for both, measured interleaved.

The machine is usually shared, so one measurement is noisy: each round measures every
configuration once in Loom (bench_train_step, a fresh process) and once in PyTorch (the zoo's
twins, models/torch_models.py, in a fresh process), alternating, and the table reports the
minimum and the median over the rounds, the ratio PyTorch / Loom of both (above 1: Loom is
faster) and Loom's channels-last time over its NCHW time. PyTorch (any CPU build, e.g. Debian's
python3-torch: run this script with /usr/bin/python3) is a yardstick only, not a dependency of
Loom.

  bazel build -c opt --config=cpu //bench:train_step
  /usr/bin/python3 bench/cpu_compare.py --loom bazel-bin/bench/train_step --threads 2 --rounds 5
  /usr/bin/python3 bench/cpu_compare.py --loom ... --models resnet18_cifar --batches 8 --layouts nhwc

  /usr/bin/python3 bench/cpu_compare.py --torch-only --models resnet18_cifar   # PyTorch only

Times are wall ms per step. Loom's CPU tier is LOOM_CPU_BACKEND's (oneDNN by default):
--loom-backend reference times the reference kernels instead. Both run their OpenMP threads under
OMP_WAIT_POLICY=PASSIVE (Loom's default; --torch-wait-policy gives PyTorch another): where other
processes share the cores, PyTorch's default of spinning at its barriers took 44 s a step of
resnet34_cifar at batch 8 against 3.4 s for Loom (load 12 on 2 cores), a measure of the
scheduler rather than of either library. The machine's 1-minute load average is read before each
measurement; the table gives its range for every row, since a loaded machine slows both sides
and only the interleaved ratios hold.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
INPUT_SETS = 4


def zoo():
    """The zoo's twins by name (models/torch_models.py), in the registry's order."""
    sys.path[:0] = [os.path.join(HERE, "..", "models")]
    import torch_models
    return torch_models.ZOO


def torch_step_ms(model_name, batch, layout, optimizer, steps, warmup, threads):
    """Wall ms per step of `steps` PyTorch steps after `warmup` + 1 untimed ones."""
    import torch, torch.nn.functional as F
    torch.set_num_threads(threads)
    row = zoo()[model_name]
    target = (batch, *row.input[1:]) if row.per_pixel else (batch,)
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    torch.manual_seed(0)
    model = row.build(row.num_classes).to(memory_format=fmt)
    if optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(batch, *row.input, generator=gen).contiguous(memory_format=fmt) for _ in range(INPUT_SETS)]
    ys = [torch.randint(0, row.num_classes, target, generator=gen) for _ in range(INPUT_SETS)]

    def step(i):
        loss = F.cross_entropy(model(xs[i % INPUT_SETS]), ys[i % INPUT_SETS])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(warmup + 1):
        step(i)
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    return (time.perf_counter() - t0) * 1e3 / steps


def torch_in_subprocess(model_name, batch, layout, a):
    """One PyTorch measurement in a fresh process, as Loom's: wall ms per step."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-only", "--models", model_name,
                          "--batches", str(batch), "--layouts", layout, "--threads", str(a.threads),
                          "--optimizer", a.optimizer, "--steps", str(steps_for(model_name, batch, a)),
                          "--warmup", str(a.warmup)], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_WAIT_POLICY=a.torch_wait_policy))
    return float(out.stdout.split()[-1])


def loom_env(a):
    env = dict(os.environ, LOOM_NUM_THREADS=str(a.threads))
    if a.loom_backend:
        env["LOOM_CPU_BACKEND"] = a.loom_backend
    return env


def loom_command(a, model_name, batch, layout, steps, warmup):
    return [a.loom, "--device", "cpu", "--models", model_name, "--batches", str(batch), "--precisions",
            "strict", "--modes", "eager", "--layout", layout, "--optimizer", a.optimizer, "--steps",
            str(steps), "--repeats", "1", "--warmup", str(warmup)]


def loom_step_ms(model_name, batch, layout, a):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        subprocess.run(loom_command(a, model_name, batch, layout, steps_for(model_name, batch, a), a.warmup)
                       + ["--json", out.name], env=loom_env(a), check=True, stdout=subprocess.DEVNULL)
        return json.loads(open(out.name).readline())["ms_per_step"]


def steps_for(model_name, batch, a):
    """Timed steps per measurement: --steps, fewer for the larger inputs (at most 2 for ImageNet's
    224x224 at batch 64, whose steps take seconds on a few cores)."""
    pixels = zoo()[model_name].input[1] * zoo()[model_name].input[2]
    work = batch * pixels
    if work >= 64 * 224 * 224:
        return min(a.steps, 2)
    return max(2, a.steps // 2) if work >= 64 * 32 * 32 else a.steps


def summary(values):
    return min(values), statistics.median(values)


def print_table(a, configs, times, loads):
    print(f"\n{a.threads} threads, {a.optimizer}, wall ms per step, min / median of {a.rounds} interleaved "
          f"round(s) ({a.steps} timed steps, fewer at the larger inputs: steps_for); Loom's CPU tier: "
          f"{a.loom_backend or 'default (oneDNN)'}; PyTorch's OMP_WAIT_POLICY {a.torch_wait_policy}; "
          f"{os.cpu_count()} cores\n")
    print("| model | batch | layout | rounds | Loom ms/step | PyTorch ms/step | PyTorch / Loom (min, median) "
          "| Loom NHWC / NCHW (median) | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (m, b, l) in configs:
        lo, to = summary(times[(m, b, l, "loom")]), summary(times[(m, b, l, "torch")])
        other = (m, b, "nchw", "loom")
        layout_ratio = ""
        if l == "nhwc" and times.get(other):
            layout_ratio = f"{lo[1] / statistics.median(times[other]):.2f}"
        load = loads[(m, b, l)]
        print(f"| {m} | {b} | {l} | {len(times[(m, b, l, 'loom')])} | {lo[0]:.1f} / {lo[1]:.1f} "
              f"| {to[0]:.1f} / {to[1]:.1f} | {to[0] / lo[0]:.2f}x, {to[1] / lo[1]:.2f}x | {layout_ratio} "
              f"| {min(load):.1f}-{max(load):.1f} |", flush=True)


def csv(kind):
    return lambda text: [kind(v) for v in text.split(",") if v]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loom", help="path of bench_train_step (bazel-bin/bench/train_step)")
    p.add_argument("--models", type=csv(str), default=None, help="zoo names (default: every model)")
    p.add_argument("--batches", type=csv(int), default=[8, 64])
    p.add_argument("--layouts", type=csv(str), default=["nchw", "nhwc"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=6, help="timed steps per measurement (halved for the "
                   "large models at batch 64)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--loom-backend", choices=("onednn", "reference"), help="LOOM_CPU_BACKEND for Loom")
    p.add_argument("--torch-wait-policy", choices=("PASSIVE", "ACTIVE"), default="PASSIVE",
                   help="OMP_WAIT_POLICY for PyTorch (Loom's is PASSIVE)")
    p.add_argument("--torch-only", action="store_true", help="one PyTorch measurement per configuration")
    a = p.parse_args()
    models = a.models or list(zoo())
    unknown = [m for m in models if m not in zoo()]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)} (the zoo has {', '.join(zoo())})")
    configs = [(m, b, l) for m in models for b in a.batches for l in a.layouts]
    if a.torch_only:
        for m, b, l in configs:
            print(m, b, l, f"{torch_step_ms(m, b, l, a.optimizer, a.steps, a.warmup, a.threads):.3f}")
        return
    if not a.loom:
        p.error("--loom is needed (or --torch-only)")
    times, loads = {}, {}
    for r in range(a.rounds):
        for m, b, l in configs:
            loads.setdefault((m, b, l), []).append(os.getloadavg()[0])
            loom = loom_step_ms(m, b, l, a)
            torch = torch_in_subprocess(m, b, l, a)
            times.setdefault((m, b, l, "loom"), []).append(loom)
            times.setdefault((m, b, l, "torch"), []).append(torch)
            print(f"round {r + 1}: {m} batch {b} {l}: loom {loom:.2f} ms, torch {torch:.2f} ms, "
                  f"load {loads[(m, b, l)][-1]:.2f}", file=sys.stderr, flush=True)
    print_table(a, configs, times, loads)


if __name__ == "__main__":
    main()
