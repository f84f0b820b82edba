"""Checks that model weights move between Loom and PyTorch as safetensors state_dicts.

Run on a host with torch (Debian's python3-torch is enough; the safetensors
package is used where installed, else the few lines below read and write the
format):
    python3 tools/model_interop.py --binary PATH/TO/model_logits [--models a,b]

For each model of the zoo's registry (default: every one; the twins are
models/torch_models.py): Loom exports its initial weights, a batch and its
logits; PyTorch loads the weights with load_state_dict(strict) and must produce
the same logits. Then PyTorch's own initial weights go the other way. Eval
mode, float32, CPU. Passes when max |logits difference| <= 1e-4 both ways.
"""
import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
import torch_models  # noqa: E402

TOLERANCE = 1e-4
MODELS = torch_models.ZOO

try:
    from safetensors.torch import load_file, save_file
except ImportError:  # the format is small enough to read and write here
    DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "BF16": torch.bfloat16}

    def load_file(path):
        with open(path, "rb") as f:
            data = f.read()
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + length])
        body = bytearray(data[8 + length:])
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            flat = torch.frombuffer(body[begin:end], dtype=DTYPES[info["dtype"]]) if end > begin else \
                torch.empty(0, dtype=DTYPES[info["dtype"]])
            out[name] = flat.reshape(info["shape"]).clone()
        return out

    def save_file(tensors, path):
        names = {v: k for k, v in DTYPES.items()}
        header, chunks, offset = {}, [], 0
        for name, t in tensors.items():
            raw = t.contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                            "data_offsets": [offset, offset + len(raw)]}
            chunks.append(raw)
            offset += len(raw)
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def run(binary, *args):
    subprocess.run([binary, *args], check=True)


def max_diff(a, b):
    return (a.float() - b.float()).abs().max().item()


def check_model(binary, name):
    results = []
    with tempfile.TemporaryDirectory() as d:
        run(binary, "export", name, d)
        batch = load_file(f"{d}/batch.safetensors")["x"]
        model = torch_models.build(name)
        model.load_state_dict(load_file(f"{d}/loom_weights.safetensors"), strict=True)
        model.eval()
        with torch.no_grad():
            diff = max_diff(model(batch), load_file(f"{d}/loom_logits.safetensors")["logits"])
        results.append((f"{name}: Loom weights in PyTorch", diff))

        torch.manual_seed(3)
        theirs = torch_models.build(name)
        with torch.no_grad():
            for key, buf in theirs.named_buffers():
                if key.endswith("running_mean"):
                    buf.copy_(torch.randn_like(buf) * 0.1)
                elif key.endswith("running_var"):
                    buf.copy_(torch.rand_like(buf) + 0.5)
        theirs.eval()
        save_file({k: v.contiguous() for k, v in theirs.state_dict().items()}, f"{d}/torch_weights.safetensors")
        run(binary, "eval", name, d)
        with torch.no_grad():
            diff = max_diff(theirs(batch), load_file(f"{d}/loom_logits_from_torch.safetensors")["logits"])
        results.append((f"{name}: PyTorch weights in Loom", diff))
    return results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True, help="path to Loom's model_logits")
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated registry names (default: all)")
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    passed = failed = 0
    for name in args.models.split(","):
        for label, diff in check_model(args.binary, name):
            ok = diff <= TOLERANCE
            passed += ok
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {label}: max |logits difference| = {diff:.3e}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
