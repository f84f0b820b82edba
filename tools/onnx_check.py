#!/usr/bin/env python3
"""Checks Loom's ONNX exports: the ONNX checker, then ONNX Runtime against Loom.

usage: python3 tools/onnx_check.py DIR [--atol A] [--rtol R]

For each DIR/<model>.onnx (written by `bazel run //examples/onnx:export -- --zoo
DIR`, with <model>.inputs.safetensors and <model>.outputs.safetensors beside it:
the example batch and Loom's CPU outputs, named as the graph's inputs and
outputs; <model>.fold_bn.onnx, of --fold-bn, reads the same files) this prints
one line:

  - the ONNX checker (onnx.checker.check_model(full_check=True), which also runs
    strict shape inference) and whether the inferred output shapes agree with
    Loom's, where the `onnx` package is installed (Debian: python3-onnx);
  - per ONNX Runtime execution provider (CPU; CUDA too where onnxruntime has it,
    with TF32 off): the largest absolute difference from Loom's outputs, the
    largest relative one (|ort - loom| / max |loom|), and whether every element
    is within atol + rtol * |loom| (defaults 1e-4 and 1e-3: float32 with a
    different summation order), where onnxruntime is installed.

Then a summary and a last line "N passed, N failed" counting the checks that
ran. Exits 1 when any failed. Needs numpy; reads safetensors itself.
"""
import argparse
import json
import pathlib
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
          "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
    """{name: array} of a safetensors file (8-byte header length, JSON header, data)."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = np.frombuffer(body[begin:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def checker(path, expected):
    """'ok', or what failed; None without the onnx package."""
    try:
        import onnx
    except ImportError:
        return None
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model, full_check=True)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as e:  # the checker's own exceptions differ between versions
        return "FAILED: " + str(e).splitlines()[0][:200]
    for value in inferred.graph.output:
        dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
        want = expected[value.name].shape
        if len(dims) != len(want) or any(d is not None and d != w for d, w in zip(dims, want)):
            return f"FAILED: inferred shape {dims} of '{value.name}', Loom's is {list(want)}"
    return "ok"


def providers():
    try:
        import onnxruntime as ort
    except ImportError:
        return None, []
    available = ort.get_available_providers()
    chosen = [("cpu", ["CPUExecutionProvider"])]
    if "CUDAExecutionProvider" in available:
        chosen.append(("cuda", [("CUDAExecutionProvider", {"use_tf32": 0}), "CPUExecutionProvider"]))
    return ort, chosen


def compare(ort, provider, path, inputs, expected, atol, rtol):
    """(max abs, max rel, within tolerance) over every output."""
    session = ort.InferenceSession(str(path), providers=provider)
    names = [o.name for o in session.get_outputs()]
    got = session.run(names, inputs)
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for name, value in zip(names, got):
        want = expected[name].astype(np.float64)
        diff = np.abs(value.astype(np.float64) - want)
        if value.shape != want.shape:
            return float("inf"), float("inf"), False
        worst_abs = max(worst_abs, float(diff.max(initial=0.0)))
        worst_rel = max(worst_rel, float(diff.max(initial=0.0) / max(np.abs(want).max(initial=0.0), 1e-12)))
        ok = ok and bool(np.all(diff <= atol + rtol * np.abs(want)))
    return worst_abs, worst_rel, ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=pathlib.Path)
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--rtol", type=float, default=1e-3)
    args = parser.parse_args()
    models = sorted(args.dir.glob("*.onnx"))
    if not models:
        print(f"onnx_check: no .onnx files in {args.dir}", file=sys.stderr)
        return 2
    ort, eps = providers()
    notes = []
    if ort is None:
        notes.append("onnxruntime is not installed: checker only")
    passed = failed = 0
    for path in models:
        name = path.name[:-len(".onnx")]
        model = name.split(".")[0]  # <model>.fold_bn.onnx compares against <model>'s files
        inputs = {k: np.ascontiguousarray(v) for k, v in read_safetensors(args.dir / f"{model}.inputs.safetensors").items()}
        expected = read_safetensors(args.dir / f"{model}.outputs.safetensors")
        line = f"{name:27s}"
        result = checker(path, expected)
        if result is None:
            if "onnx is not installed: no checker" not in notes:
                notes.append("onnx is not installed: no checker")
        else:
            line += f" checker: {result}"
            passed, failed = (passed + 1, failed) if result == "ok" else (passed, failed + 1)
        for label, provider in eps:
            try:
                a, r, ok = compare(ort, provider, path, inputs, expected, args.atol, args.rtol)
                line += f" | {label}: max abs {a:.3g}, max rel {r:.3g} {'ok' if ok else 'FAILED'}"
            except Exception as e:  # a runtime that refuses the model is a failed check, not a crash
                ok = False
                line += f" | {label}: FAILED to run: {str(e).splitlines()[0][:200]}"
            passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
        print(line, flush=True)
    tolerance = f"tolerance atol {args.atol:g} + rtol {args.rtol:g} * |loom|"
    print(f"{len(models)} models; {tolerance}; providers: {', '.join(l for l, _ in eps) or 'none'}"
          + ("; " + "; ".join(notes) if notes else ""))
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
