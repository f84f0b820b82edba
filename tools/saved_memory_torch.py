"""The PyTorch half of tools/saved_memory.cc: what one training step of a zoo
model's twin (models/torch_models.py) keeps alive between its forward and its
backward. torch.autograd.graph.saved_tensors_hooks sees every tensor a node
saves; they are summed once per storage, leaving out the input batch and the
parameters (which Loom's count leaves out too: someone else holds them), and
charged to the op that saved the storage first in the forward.

    /usr/bin/python3 tools/saved_memory_torch.py --model resnet9 --batch 8
    /usr/bin/python3 tools/saved_memory_torch.py --model vgg11_bn --batch 32 --device cuda --bf16 --channels-last
"""
import argparse
import os
import sys
from collections import OrderedDict

import torch

# models/torch_models.py in the repository; beside this file in the GPU bundle (.bundle/bench).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "models"), HERE]
import torch_models  # noqa: E402


def storage_of(t):
    """(pointer, bytes) of t's storage (torch 1.13's TypedStorage and later's untyped one)."""
    if hasattr(t, "untyped_storage"):
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    s = t.storage()
    return s.data_ptr(), s.size() * t.element_size()


def saved_bytes(net, x, target, bf16):
    """{op: bytes} of the storages the graph saved, and the op order."""
    excluded = {storage_of(p)[0] for p in net.parameters()}
    excluded |= {storage_of(b)[0] for b in net.buffers()}
    excluded.add(storage_of(x)[0])
    seen = {}  # storage pointer -> (bytes, op)
    stack = ["model"]  # the innermost module running; a parent's own ops carry its name

    def pack(t):
        ptr, nbytes = storage_of(t)
        if ptr not in excluded and ptr not in seen and nbytes > 0:
            seen[ptr] = (nbytes, stack[-1])
        return t

    def enter(module, _inputs):
        stack.append(type(module).__name__)

    def leave(_module, _inputs, _output):
        stack.pop()

    hooks = [m.register_forward_pre_hook(enter) for m in net.modules()]
    hooks += [m.register_forward_hook(leave) for m in net.modules()]
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=bf16):
            out = net(x)
        stack.append("cross_entropy")
        loss = torch.nn.functional.cross_entropy(out, target)
    for h in hooks:
        h.remove()
    per_op = OrderedDict()
    for nbytes, op in seen.values():
        per_op[op] = per_op.get(op, 0) + nbytes
    del loss
    return per_op


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="resnet9", choices=sorted(torch_models.ZOO))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--channels-last", action="store_true")
    args = parser.parse_args()
    row = torch_models.ZOO[args.model]
    fmt = torch.channels_last if args.channels_last else torch.contiguous_format
    net = row.build(row.num_classes).to(args.device).to(memory_format=fmt).train()
    torch.manual_seed(0)
    x = torch.randn((args.batch,) + row.input, device=args.device).to(memory_format=fmt)
    target_shape = (args.batch,) + row.input[1:] if row.per_pixel else (args.batch,)
    target = torch.zeros(target_shape, dtype=torch.int64, device=args.device)
    per_op = saved_bytes(net, x, target, args.bf16)
    print(f"{args.model} batch {args.batch} on {args.device}{', bf16 autocast' if args.bf16 else ''}"
          f"{', channels-last' if args.channels_last else ''}: saved tensors per module type (MiB)")
    for op, nbytes in sorted(per_op.items(), key=lambda kv: -kv[1]):
        print(f"  {op:<32} {nbytes / 2**20:>16.2f}")
    print(f"  {'total':<32} {sum(per_op.values()) / 2**20:>16.2f}")


if __name__ == "__main__":
    main()
