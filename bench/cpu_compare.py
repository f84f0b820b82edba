"""Loom vs PyTorch on the CPU: training steps of lenet5 and mnist_net (Adam lr 1e-3,
batch 128, NCHW), the same thread count for both, measured interleaved.

The machine is usually shared, so one measurement is noisy: each round runs Loom's
bench_train_step once and PyTorch once per model, and the table reports the minimum
and the median over the rounds. PyTorch (any CPU build, e.g. Debian's python3-torch)
is a yardstick only, not a dependency of Loom.

  bazel build -c opt --config=cpu //bench:train_step
  python3 bench/cpu_compare.py --loom bazel-bin/bench/train_step --threads 2 --rounds 5

  python3 bench/cpu_compare.py --torch-only --models lenet5   # one PyTorch measurement

--cpu-time reports CPU ms (user + sys, all threads) per step instead of wall ms:
for Loom the difference between a 31-step and a 1-step run, over the 30 extra
steps; for PyTorch its process time over the timed steps, with
OMP_WAIT_POLICY=PASSIVE so that OpenMP's spinning is not counted as work. On a
machine shared with other work it is far steadier than the wall clock. The table's
header gives the machine's load average before and after the rounds.
"""
import argparse, json, os, resource, statistics, subprocess, sys, tempfile, time

MODELS = ("lenet5", "mnist_net")
INPUT_SETS = 4


def torch_step_ms(model_name, batch, steps, warmup, threads):
    """(wall, CPU) ms per step of one PyTorch run (medians of 3 repeats of `steps` steps)."""
    import torch, torch.nn.functional as F
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_bench import MODELS as TORCH_MODELS  # the GPU benchmark's definitions
    torch.set_num_threads(threads)
    make, shape = TORCH_MODELS[model_name]
    torch.manual_seed(0)
    model = make()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    xs = [torch.randn(batch, *shape, generator=gen) for _ in range(INPUT_SETS)]
    ys = [torch.randint(0, 10, (batch,), generator=gen) for _ in range(INPUT_SETS)]

    def step(i):
        loss = F.cross_entropy(model(xs[i % INPUT_SETS]), ys[i % INPUT_SETS])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(warmup + 1):
        step(i)
    repeats, cpu = [], []
    for _ in range(3):
        t0, c0 = time.perf_counter(), time.process_time()  # process_time: every thread's CPU time
        for i in range(steps):
            step(i)
        repeats.append((time.perf_counter() - t0) * 1e3 / steps)
        cpu.append((time.process_time() - c0) * 1e3 / steps)
    return statistics.median(repeats), statistics.median(cpu)


def loom_step_ms(binary, model_name, batch, steps, warmup, threads):
    env = dict(os.environ, LOOM_NUM_THREADS=str(threads))
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        subprocess.run([binary, "--device", "cpu", "--models", model_name, "--batches", str(batch),
                        "--precisions", "strict", "--modes", "eager", "--optimizer", "adam",
                        "--steps", str(steps), "--repeats", "3", "--warmup", str(warmup),
                        "--json", out.name], env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(open(out.name).readline())["ms_per_step"]


def torch_in_subprocess(model_name, a, cpu_time=False):
    """One PyTorch measurement in a fresh process, as Loom's (no state carried over): wall or CPU
    ms per step (CPU time with OpenMP's threads sleeping when idle, so spinning is not counted)."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE") if cpu_time else None
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-only", "--models", model_name,
                          "--batch", str(a.batch), "--threads", str(a.threads), "--steps", str(a.steps),
                          "--warmup", str(a.warmup)], check=True, capture_output=True, text=True, env=env)
    wall, cpu = out.stdout.split()[-2:]
    return float(cpu if cpu_time else wall)


def children_cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def loom_cpu_ms(m, a):
    """Loom's CPU ms per step: a run of 31 timed steps less a run of 1, over the 30 extra steps
    (the difference cancels the start-up and the first step)."""
    spent = []
    for steps in (1, 31):
        before = children_cpu_seconds()
        subprocess.run([a.loom, "--device", "cpu", "--models", m, "--batches", str(a.batch), "--precisions",
                        "strict", "--modes", "eager", "--optimizer", "adam", "--steps", str(steps), "--repeats",
                        "1", "--warmup", "0"], env=dict(os.environ, LOOM_NUM_THREADS=str(a.threads)),
                       check=True, stdout=subprocess.DEVNULL)
        spent.append(children_cpu_seconds() - before)
    return (spent[1] - spent[0]) * 1e3 / 30


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--loom", help="path of bench_train_step (bazel-bin/bench/train_step)")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--torch-only", action="store_true", help="one PyTorch measurement per model")
    p.add_argument("--cpu-time", action="store_true", help="CPU ms per step instead of wall ms")
    a = p.parse_args()
    models = [m for m in a.models.split(",") if m]
    if a.torch_only:
        for m in models:
            wall, cpu = torch_step_ms(m, a.batch, a.steps, a.warmup, a.threads)
            print(m, f"{wall:.3f} {cpu:.3f}")
        return
    if not a.loom:
        p.error("--loom is needed (or --torch-only)")
    load_before = os.getloadavg()
    times = {(m, f): [] for m in models for f in ("loom", "torch")}
    for r in range(a.rounds):
        for m in models:
            if a.cpu_time:
                loom = loom_cpu_ms(m, a)
            else:
                loom = loom_step_ms(a.loom, m, a.batch, a.steps, a.warmup, a.threads)
            torch = torch_in_subprocess(m, a, a.cpu_time)
            times[(m, "loom")].append(loom)
            times[(m, "torch")].append(torch)
            print(f"round {r + 1}: {m} loom {times[(m, 'loom')][-1]:.2f} ms, torch {times[(m, 'torch')][-1]:.2f} ms",
                  file=sys.stderr, flush=True)
    unit = "CPU ms/step" if a.cpu_time else "ms/step"
    load_after = os.getloadavg()
    print(f"\n{a.threads} threads, batch {a.batch}, Adam, {a.rounds} interleaved rounds ({unit}: min / median); "
          f"load average (1, 5, 15 min) {' '.join(f'{v:.2f}' for v in load_before)} before, "
          f"{' '.join(f'{v:.2f}' for v in load_after)} after, on {os.cpu_count()} cores\n")
    print(f"| model | Loom {unit} | PyTorch {unit} | Loom vs PyTorch (min, median) |")
    print("|---|---|---|---|")
    for m in models:
        lo, to = times[(m, "loom")], times[(m, "torch")]
        print(f"| {m} | {min(lo):.2f} / {statistics.median(lo):.2f} | {min(to):.2f} / {statistics.median(to):.2f} "
              f"| {min(to) / min(lo):.2f}x, {statistics.median(to) / statistics.median(lo):.2f}x |")


if __name__ == "__main__":
    main()
