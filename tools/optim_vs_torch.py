#!/usr/bin/env python3
"""Checks Loom's SGD, Adam, AdamW, RMSprop and Adagrad steps against torch.optim on the same numbers.

For each case (optimizer and hyper-parameters), dtype and device, it draws
parameters and per-step gradients, runs N steps in Loom (the optim_dump binary,
built from //tools:optim_dump) and in torch.optim (PyTorch's defaults: foreach
on CUDA, for-loop on CPU), and prints the largest |loom - torch| over all
parameters. Exits 1 when a float32 case differs by more than 1e-6 (float64:
1e-12), or when the binary fails.

On the GPU host (PyTorch installed; the binary's shared libraries on
LD_LIBRARY_PATH, e.g. a tools/gpu_bundle.sh bundle's lib/):
    python3 tools/optim_vs_torch.py --binary bin/tools_optim_dump --steps 10
The input file format is documented in tools/optim_dump.cc.
"""
import argparse
import array
import math
import os
import random
import struct
import subprocess
import sys
import tempfile

# Odd sizes around the GPU kernels' 4096-element chunks, and an empty tensor.
SHAPES = [(1,), (7,), (33, 3), (4097,), (2, 3, 5, 5), (1000,), (0, 4)]

CASES = [
    ("sgd", {"lr": 0.1}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.2, "weight_decay": 1e-2}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4}),
    ("sgd", {"lr": 0.05, "momentum": 0.5, "maximize": True}),
    ("adam", {"lr": 1e-2}),
    ("adam", {"lr": 1e-2, "weight_decay": 0.1, "amsgrad": True}),
    ("adam", {"lr": 1e-2, "betas": (0.8, 0.99), "eps": 1e-6, "maximize": True}),
    ("adamw", {"lr": 1e-2}),
    ("adamw", {"lr": 1e-2, "weight_decay": 0.1, "amsgrad": True}),
    ("rmsprop", {"lr": 1e-2}),
    ("rmsprop", {"lr": 1e-3, "alpha": 0.9, "weight_decay": 1e-2, "momentum": 0.9}),
    ("rmsprop", {"lr": 1e-3, "momentum": 0.5, "centered": True, "maximize": True}),
    ("adagrad", {"lr": 1e-2}),
    ("adagrad", {"lr": 5e-2, "lr_decay": 0.1, "weight_decay": 1e-2, "initial_accumulator_value": 0.1,
                 "maximize": True}),
]

TOLERANCE = {"float32": 1e-6, "float64": 1e-12}


def draw(seed, steps):
    """Parameters in [-1, 1) (so float32 ulps stay below 1.2e-7) and normal gradients."""
    rng = random.Random(seed)
    params = [[rng.uniform(-1.0, 1.0) for _ in range(math.prod(s))] for s in SHAPES]
    grads = [[[rng.gauss(0.0, 1.0) for _ in range(math.prod(s))] for s in SHAPES]
             for _ in range(steps)]
    return params, grads


def write_input(path, params, grads):
    with open(path, "wb") as f:
        f.write(b"LOOMOPT1")
        f.write(struct.pack("<qq", len(SHAPES), len(grads)))
        for shape in SHAPES:
            f.write(struct.pack("<q", len(shape)) + struct.pack(f"<{len(shape)}q", *shape))
        for values in params + [g for step in grads for g in step]:
            f.write(struct.pack(f"<{len(values)}d", *values))


def loom_flags(kwargs):
    flags = []
    for key, value in kwargs.items():
        if key == "betas":
            flags += ["--beta1", repr(value[0]), "--beta2", repr(value[1])]
        elif isinstance(value, bool):
            flags += [f"--{key}"] if value else []
        else:
            flags += [f"--{key}", repr(value)]
    return flags


def run_loom(binary, name, kwargs, dtype, device, params, grads, workdir):
    in_path, out_path = os.path.join(workdir, "in.bin"), os.path.join(workdir, "out.bin")
    write_input(in_path, params, grads)
    command = [binary, "--optimizer", name, "--dtype", dtype, "--device", device,
               *loom_flags(kwargs), in_path, out_path]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    values = array.array("d")
    with open(out_path, "rb") as f:
        values.frombytes(f.read())
    if sys.byteorder != "little":
        values.byteswap()
    expected = sum(len(p) for p in params)
    if len(values) != expected:
        raise RuntimeError(f"optim_dump wrote {len(values)} values, expected {expected}")
    return list(values)


def run_torch(name, kwargs, dtype, device, params, grads):
    import torch

    optimizer = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
                 "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}
    as_tensor = lambda values, shape: (torch.tensor(values, dtype=torch.float64).reshape(shape)
                                       .to(getattr(torch, dtype)).to(device))
    tensors = [as_tensor(v, s).requires_grad_() for v, s in zip(params, SHAPES)]
    opt = optimizer[name](tensors, **kwargs)
    for step in grads:
        for p, g, shape in zip(tensors, step, SHAPES):
            p.grad = as_tensor(g, shape)
        opt.step()
    return [x for p in tensors for x in p.detach().cpu().double().flatten().tolist()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="bazel-bin/tools/optim_dump")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--devices", default=None, help="cpu,cuda (default: cuda too if available)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import torch

    devices = (args.devices or ("cpu,cuda" if torch.cuda.is_available() else "cpu")).split(",")
    failures = 0
    with tempfile.TemporaryDirectory() as workdir:
        for index, (name, kwargs) in enumerate(CASES):
            params, grads = draw(args.seed + index, args.steps)
            for dtype in ("float32", "float64"):
                for device in devices:
                    loom = run_loom(args.binary, name, kwargs, dtype, device, params, grads, workdir)
                    ref = run_torch(name, kwargs, dtype, device, params, grads)
                    diff = max((abs(a - b) for a, b in zip(loom, ref)), default=0.0)
                    ok = diff <= TOLERANCE[dtype]
                    failures += not ok
                    print(f"{'ok  ' if ok else 'FAIL'} {name:7} {dtype} {device:4} "
                          f"max |loom - torch| = {diff:.3e}  {kwargs}")
    print(f"{failures} case(s) above tolerance" if failures else "all cases within tolerance")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
