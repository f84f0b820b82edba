#!/usr/bin/env python3
"""Checks that model weights move between Loom and PyTorch as safetensors state_dicts.

Run on a host with torch and safetensors:
    python3 tools/model_interop.py --binary PATH/TO/model_logits

For each model (the architectures of bench/torch_bench.py, written out
again below): Loom exports its initial weights, a batch and its logits; PyTorch
loads the weights with load_state_dict(strict) and must produce the same logits.
Then PyTorch's own initial weights go the other way. Eval mode, float32, CPU.
Passes when max |logits difference| <= 1e-4 both ways.
"""
import argparse
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
from safetensors.torch import load_file, save_file

TOLERANCE = 1e-4


def mnist_net():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def lenet5():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def conv_bn(ci, co):
    return nn.Sequential(nn.Conv2d(ci, co, 3, padding=1, bias=False), nn.BatchNorm2d(co), nn.ReLU())


class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a = conv_bn(c, c)
        self.b = conv_bn(c, c)

    def forward(self, x):
        return x + self.b(self.a(x))


def resnet9():
    return nn.Sequential(
        conv_bn(3, 64), conv_bn(64, 128), nn.MaxPool2d(2), Residual(128),
        conv_bn(128, 256), nn.MaxPool2d(2), conv_bn(256, 512), nn.MaxPool2d(2), Residual(512),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(512, 10))


MODELS = {"mnist_net": mnist_net, "lenet5": lenet5, "resnet9": resnet9}


def run(binary, *args):
    subprocess.run([binary, *args], check=True)


def max_diff(a, b):
    return (a.float() - b.float()).abs().max().item()


def check_model(binary, name):
    results = []
    with tempfile.TemporaryDirectory() as d:
        run(binary, "export", name, d)
        batch = load_file(f"{d}/batch.safetensors")["x"]
        model = MODELS[name]()
        model.load_state_dict(load_file(f"{d}/loom_weights.safetensors"), strict=True)
        model.eval()
        with torch.no_grad():
            diff = max_diff(model(batch), load_file(f"{d}/loom_logits.safetensors")["logits"])
        results.append((f"{name}: Loom weights in PyTorch", diff))

        torch.manual_seed(3)
        theirs = MODELS[name]()
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
    args = parser.parse_args()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    passed = failed = 0
    for name in MODELS:
        for label, diff in check_model(args.binary, name):
            ok = diff <= TOLERANCE
            passed += ok
            failed += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {label}: max |logits difference| = {diff:.3e}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
