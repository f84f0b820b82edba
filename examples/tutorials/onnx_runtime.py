#!/usr/bin/env python3
"""docs/onnx.md: runs the model that examples/tutorials/onnx.cc exported in ONNX
Runtime on the same batch, at two batch sizes, and compares with Loom's logits.

usage: python3 examples/tutorials/onnx_runtime.py SCRATCH_DIR
Needs numpy and onnxruntime (pip install onnxruntime); safetensors is read here.
"""
import json
import sys

import numpy as np


def read_safetensors(path):
    """{name: float32 array} of a safetensors file: 8-byte header length, JSON header, data."""
    data = open(path, "rb").read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {name: np.frombuffer(body[info["data_offsets"][0]:info["data_offsets"][1]], np.float32)
            .reshape(info["shape"]) for name, info in header.items() if name != "__metadata__"}


def main(folder):
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnx_runtime: onnxruntime is not installed (pip install onnxruntime)")
        return 3
    example = read_safetensors(f"{folder}/example.safetensors")
    session = ort.InferenceSession(f"{folder}/net.onnx", providers=["CPUExecutionProvider"])
    print("inputs:", [(i.name, i.shape) for i in session.get_inputs()])
    (logits,) = session.run(["logits"], {"image": example["image"]})
    print("max |onnxruntime - loom|: %.2e" % np.abs(logits - example["logits"]).max())
    (one,) = session.run(["logits"], {"image": example["image"][:1]})  # the batch is symbolic
    print("batch of 1:", one.shape, "same row:", np.allclose(one[0], logits[0], atol=1e-5))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1]))
