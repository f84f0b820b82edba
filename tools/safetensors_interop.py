#!/usr/bin/env python3
# File: tools/safetensors_interop.py
# Checks that Loom's safetensors files and PyTorch's are interchangeable, both
# ways, with the reference `safetensors` package (run where torch and
# safetensors are installed, e.g. the GPU host):
#   1. Loom writes random tensors of every dtype; safetensors.torch loads them and
#      every name, dtype, shape, byte (CRC-32) and sum matches Loom's listing.
#   2. safetensors.torch writes tensors of every dtype (0-d, zero-size, special
#      floats, metadata); Loom reads them and lists the same values.
#
#   bazel build //examples/interop:safetensors_roundtrip
#   python3 tools/safetensors_interop.py [--binary bazel-bin/examples/interop/safetensors_roundtrip]
#
# Ends with "N passed, N failed" (one check per tensor and direction) and exits 1
# on any mismatch.
import argparse
import math
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

DTYPES = {
    "F32": torch.float32, "F64": torch.float64, "F16": torch.float16, "BF16": torch.bfloat16,
    "I32": torch.int32, "I64": torch.int64, "U8": torch.uint8, "BOOL": torch.bool,
}
CODES = {dtype: code for code, dtype in DTYPES.items()}


def run_loom(binary, *args):
    """Loom's listing: ({name: (code, shape, sum, crc)} in file order, {metadata})."""
    out = subprocess.run([binary, *args], check=True, capture_output=True, encoding="utf-8").stdout
    tensors, metadata = {}, {}
    for line in out.splitlines():
        fields = line.split("\t")
        if fields[0] == "tensor":
            _, name, code, shape, total, crc = fields
            dims = () if shape == "scalar" else tuple(int(d) for d in shape.split("x"))
            tensors[name] = (code, dims, float(total), crc)
        elif fields[0] == "metadata":
            metadata[fields[1]] = fields[2]
    return tensors, metadata


def describe(t):
    """The same four facts Loom prints, computed by PyTorch."""
    t = t.contiguous()
    raw = bytes(t.reshape(-1).view(torch.uint8).tolist())
    return (CODES[t.dtype], tuple(t.shape), t.to(torch.float64).sum().item(),
            f"{zlib.crc32(raw):08x}")


def same_sum(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))  # summation order differs


class Checks:
    def __init__(self):
        self.passed = self.failed = 0

    def compare(self, direction, name, loom_view, torch_view):
        code, shape, total, crc = loom_view
        ok = (code, shape, crc) == (torch_view[0], torch_view[1], torch_view[3]) and same_sum(
            total, torch_view[2])
        self.passed += ok
        self.failed += not ok
        status = "ok" if ok else "MISMATCH"
        print(f"{direction:12} {name:24} loom={loom_view} torch={torch_view} {status}")

    def expect(self, what, ok):
        self.passed += ok
        self.failed += not ok
        print(f"{what}: {'ok' if ok else 'MISMATCH'}")


def loom_to_torch(binary, folder, checks):
    path = str(folder / "loom.safetensors")
    listing, metadata = run_loom(binary, "write", path, "--seed", "42")
    loaded = load_file(path)
    checks.expect("loom->torch names", sorted(loaded) == sorted(listing))
    for name, loom_view in listing.items():
        if name in loaded:
            checks.compare("loom->torch", name, loom_view, describe(loaded[name]))
    with safe_open(path, framework="pt") as f:
        checks.expect("loom->torch metadata", f.metadata() == metadata)


def torch_tensors():
    gen = torch.Generator().manual_seed(0)
    specials = torch.tensor([1.5, -0.0, float("inf"), float("nan"), -3.25])
    return {
        "fc.weight": torch.randn(10, 32, generator=gen),
        "fc.bias": torch.randn(10, generator=gen),
        "specials": specials,
        "f64": torch.randn(3, 3, dtype=torch.float64, generator=gen),
        "f16": torch.randn(4, 5, generator=gen).half(),
        "bf16": torch.randn(2, 7, generator=gen).bfloat16(),
        "i32": torch.randint(-2**31, 2**31 - 1, (6,), dtype=torch.int32, generator=gen),
        "bn.num_batches_tracked": torch.tensor(12345, dtype=torch.int64),
        "u8": torch.randint(0, 256, (2, 2, 2), dtype=torch.uint8, generator=gen),
        "mask": torch.randint(0, 2, (5,), generator=gen).bool(),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4, dtype=torch.int64),
        "transposed": torch.randn(3, 4, generator=gen).t().contiguous(),
    }


def torch_to_loom(binary, folder, checks):
    path = str(folder / "torch.safetensors")
    tensors = torch_tensors()
    metadata = {"format": "pt", "writer": "torch", "note": "tab-free, ünïcode"}
    save_file(tensors, path, metadata=metadata)
    listing, loom_metadata = run_loom(binary, "read", path)
    checks.expect("torch->loom names", sorted(listing) == sorted(tensors))
    for name, t in tensors.items():
        if name in listing:
            checks.compare("torch->loom", name, listing[name], describe(t))
    checks.expect("torch->loom metadata", loom_metadata == metadata)


def main():
    parser = argparse.ArgumentParser(description="safetensors interop between Loom and PyTorch")
    parser.add_argument("--binary", default="bazel-bin/examples/interop/safetensors_roundtrip")
    args = parser.parse_args()
    binary = str(Path(args.binary).resolve())
    checks = Checks()
    with tempfile.TemporaryDirectory() as folder:
        loom_to_torch(binary, Path(folder), checks)
        torch_to_loom(binary, Path(folder), checks)
    print(f"{checks.passed} passed, {checks.failed} failed")
    return 1 if checks.failed else 0


if __name__ == "__main__":
    sys.exit(main())
