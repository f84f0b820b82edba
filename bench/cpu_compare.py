"""Loom vs PyTorch on the CPU: training steps of lenet5 and mnist_net (Adam lr 1e-3,
batch 128, NCHW), the same thread count for both, measured interleaved.

The machine is usually shared, so one measurement is noisy: each round runs Loom's
bench_train_step once and PyTorch once per model, and the table reports the minimum
and the median over the rounds. PyTorch (any CPU build, e.g. Debian's python3-torch)
is a yardstick only, not a dependency of Loom.

  bazel build -c opt --config=cpu //bench:train_step
  python3 bench/cpu_compare.py --loom bazel-bin/bench/train_step --threads 2 --rounds 5

  python3 bench/cpu_compare.py --torch-only --models lenet5   # one PyTorch measurement
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

MODELS = ("lenet5", "mnist_net")
INPUT_SETS = 4


def torch_step_ms(model_name, batch, steps, warmup, threads):
    """ms per step of one PyTorch run (median of 3 repeats of `steps` steps)."""
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
    repeats = []
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        repeats.append((time.perf_counter() - t0) * 1e3 / steps)
    return statistics.median(repeats)


def loom_step_ms(binary, model_name, batch, steps, warmup, threads):
    env = dict(os.environ, LOOM_NUM_THREADS=str(threads))
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        subprocess.run([binary, "--device", "cpu", "--models", model_name, "--batches", str(batch),
                        "--precisions", "strict", "--modes", "eager", "--optimizer", "adam",
                        "--steps", str(steps), "--repeats", "3", "--warmup", str(warmup),
                        "--json", out.name], env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(open(out.name).readline())["ms_per_step"]


def torch_in_subprocess(model_name, a):
    """One PyTorch measurement in a fresh process, as Loom's (no state carried over)."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-only", "--models", model_name,
                          "--batch", str(a.batch), "--threads", str(a.threads), "--steps", str(a.steps),
                          "--warmup", str(a.warmup)], check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


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
    a = p.parse_args()
    models = [m for m in a.models.split(",") if m]
    if a.torch_only:
        for m in models:
            print(m, f"{torch_step_ms(m, a.batch, a.steps, a.warmup, a.threads):.3f}")
        return
    if not a.loom:
        p.error("--loom is needed (or --torch-only)")
    times = {(m, f): [] for m in models for f in ("loom", "torch")}
    for r in range(a.rounds):
        for m in models:
            times[(m, "loom")].append(loom_step_ms(a.loom, m, a.batch, a.steps, a.warmup, a.threads))
            times[(m, "torch")].append(torch_in_subprocess(m, a))
            print(f"round {r + 1}: {m} loom {times[(m, 'loom')][-1]:.2f} ms, torch {times[(m, 'torch')][-1]:.2f} ms",
                  file=sys.stderr, flush=True)
    print(f"\n{a.threads} threads, batch {a.batch}, Adam, {a.rounds} interleaved rounds (ms/step: min / median)\n")
    print("| model | Loom ms/step | PyTorch ms/step | Loom vs PyTorch (min, median) |")
    print("|---|---|---|---|")
    for m in models:
        lo, to = times[(m, "loom")], times[(m, "torch")]
        print(f"| {m} | {min(lo):.2f} / {statistics.median(lo):.2f} | {min(to):.2f} / {statistics.median(to):.2f} "
              f"| {min(to) / min(lo):.2f}x, {statistics.median(to) / statistics.median(lo):.2f}x |")


if __name__ == "__main__":
    main()
