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

Loom's CPU tier is LOOM_CPU_BACKEND's (oneDNN by default): --loom-backend reference times the
reference kernels instead. --cpu-time reports CPU ms (user + sys, all threads) per step instead
of wall ms, with PyTorch under OMP_WAIT_POLICY=PASSIVE so that OpenMP's spinning is not counted
as work (Loom's pool never spins). The table's header gives the machine's load average before
and after the rounds.
"""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
INPUT_SETS = 4


def zoo():
    """The zoo's twins by name (models/torch_models.py), in the registry's order."""
    sys.path[:0] = [os.path.join(HERE, "..", "models")]
    import torch_models
    return torch_models.ZOO


def torch_step_ms(model_name, batch, layout, optimizer, steps, warmup, threads):
    """(wall, CPU) ms per step of `steps` PyTorch steps after `warmup` untimed ones."""
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
    t0, c0 = time.perf_counter(), time.process_time()  # process_time: every thread's CPU time
    for i in range(steps):
        step(i)
    return (time.perf_counter() - t0) * 1e3 / steps, (time.process_time() - c0) * 1e3 / steps


def torch_in_subprocess(model_name, batch, layout, a):
    """One PyTorch measurement in a fresh process, as Loom's: wall or CPU ms per step."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE") if a.cpu_time else None
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-only", "--models", model_name,
                          "--batches", str(batch), "--layouts", layout, "--threads", str(a.threads),
                          "--optimizer", a.optimizer, "--steps", str(steps_for(model_name, batch, a)),
                          "--warmup", str(a.warmup)], check=True, capture_output=True, text=True, env=env)
    wall, cpu = out.stdout.split()[-2:]
    return float(cpu if a.cpu_time else wall)


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


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loom_cpu_ms(model_name, batch, layout, a):
    """Loom's CPU ms per step: a run of S + 1 timed steps less a run of 1, over the S extra
    steps (the difference cancels the start-up and the first step)."""
    steps = steps_for(model_name, batch, a)
    spent = []
    for n in (1, steps + 1):
        before = children_cpu_seconds()
        subprocess.run(loom_command(a, model_name, batch, layout, n, 0), env=loom_env(a), check=True,
                       stdout=subprocess.DEVNULL)
        spent.append(children_cpu_seconds() - before)
    return (spent[1] - spent[0]) * 1e3 / steps


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


def print_table(a, configs, times, load_before, load_after):
    unit = "CPU ms/step" if a.cpu_time else "ms/step"
    print(f"\n{a.threads} threads, {a.optimizer}, {a.rounds} interleaved rounds ({unit}: min / median); Loom's CPU "
          f"tier: {a.loom_backend or 'default (oneDNN)'}; load average (1, 5, 15 min) "
          f"{' '.join(f'{v:.2f}' for v in load_before)} before, {' '.join(f'{v:.2f}' for v in load_after)} after, "
          f"on {os.cpu_count()} cores\n")
    print(f"| model | batch | layout | Loom {unit} | PyTorch {unit} | PyTorch / Loom (min, median) | Loom NHWC / NCHW |")
    print("|---|---|---|---|---|---|---|")
    for (m, b, l) in configs:
        lo, to = summary(times[(m, b, l, "loom")]), summary(times[(m, b, l, "torch")])
        other = (m, b, "nchw", "loom")
        layout_ratio = ""
        if l == "nhwc" and times.get(other):
            layout_ratio = f"{lo[1] / statistics.median(times[other]):.2f}"
        print(f"| {m} | {b} | {l} | {lo[0]:.2f} / {lo[1]:.2f} | {to[0]:.2f} / {to[1]:.2f} "
              f"| {to[0] / lo[0]:.2f}x, {to[1] / lo[1]:.2f}x | {layout_ratio} |")


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
    p.add_argument("--torch-only", action="store_true", help="one PyTorch measurement per configuration")
    p.add_argument("--cpu-time", action="store_true", help="CPU ms per step instead of wall ms")
    a = p.parse_args()
    models = a.models or list(zoo())
    unknown = [m for m in models if m not in zoo()]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)} (the zoo has {', '.join(zoo())})")
    configs = [(m, b, l) for m in models for b in a.batches for l in a.layouts]
    if a.torch_only:
        for m, b, l in configs:
            wall, cpu = torch_step_ms(m, b, l, a.optimizer, a.steps, a.warmup, a.threads)
            print(m, b, l, f"{wall:.3f} {cpu:.3f}")
        return
    if not a.loom:
        p.error("--loom is needed (or --torch-only)")
    load_before = os.getloadavg()
    times = {}
    for r in range(a.rounds):
        for m, b, l in configs:
            loom = loom_cpu_ms(m, b, l, a) if a.cpu_time else loom_step_ms(m, b, l, a)
            torch = torch_in_subprocess(m, b, l, a)
            times.setdefault((m, b, l, "loom"), []).append(loom)
            times.setdefault((m, b, l, "torch"), []).append(torch)
            print(f"round {r + 1}: {m} batch {b} {l}: loom {loom:.2f} ms, torch {torch:.2f} ms", file=sys.stderr,
                  flush=True)
    print_table(a, configs, times, load_before, os.getloadavg())


if __name__ == "__main__":
    main()
