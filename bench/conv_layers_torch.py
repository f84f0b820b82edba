"""The convolutions bench/conv_layers timed in Loom, timed in PyTorch the same way, printed side by side.

  conv_layers --model mobilenet_v2_cifar --batch 128 --precision bf16 --depthwise --json dw.jsonl
  python3 bench/conv_layers_torch.py dw.jsonl [--json torch.jsonl] [--device cuda:0]

For each JSON line of conv_layers (one distinct convolution of a zoo model: x and weight shapes, stride,
padding, dilation, groups, bias, precision, layout), PyTorch runs F.conv2d on operands of the same shapes,
dtype and layout, with cudnn.benchmark on (its algorithms chosen before capture) and TF32 as the line's
precision says. As in Loom, the forward alone and the forward with both gradients (x, weight and bias; the
gradients set to None first, as zero_grad does) are each captured in a CUDA graph and replayed; the median
of the repeats' ms per replay is kept. The table gives each layer's times in both and the model's per-step
sums (each layer times its uses); a ratio above 1 means Loom is faster. Lines of conv_layers --split also
carry each gradient alone (the forward with dx only, and with the weight's and bias's only), timed here the
same way and printed in a second table.
"""
import argparse, json, statistics, sys

import torch
import torch.nn.functional as F


def time_graph(work, replays, repeats):
    """ms per replay of a CUDA graph of work(), the median of `repeats` timings of `replays` replays."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as capture requires
        for _ in range(3):
            work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    graph.replay()
    times = []
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end) / replays)
    return statistics.median(times)


def time_layer(row, device):
    dtype = torch.bfloat16 if row["precision"] == "bf16" else torch.float32
    fmt = torch.channels_last if row["layout"] == "nhwc" else torch.contiguous_format
    torch.backends.cuda.matmul.allow_tf32 = row["precision"] == "tf32"
    torch.backends.cudnn.allow_tf32 = row["precision"] == "tf32"
    gen = torch.Generator(device=device).manual_seed(1)
    make = lambda shape: torch.randn(shape, device=device, dtype=dtype, generator=gen)
    x = make(row["x"]).contiguous(memory_format=fmt)
    w = make(row["weight"]).contiguous(memory_format=fmt)
    b = make([row["weight"][0]]) if row["bias"] else None
    args = dict(stride=row["stride"], padding=row["padding"], dilation=row["dilation"], groups=row["groups"])
    dy = torch.randn_like(F.conv2d(x, w, b, **args))
    xg, wg = x.detach().requires_grad_(), w.detach().requires_grad_()
    bg = b.detach().requires_grad_() if b is not None else None
    out = {}

    def forward():
        out["y"] = F.conv2d(x, w, b, **args)

    def backward_of(xs, ws, bs):
        """The forward and backward through the operands that require grad."""
        def work():
            for t in (xs, ws, bs):
                if t is not None and t.requires_grad:
                    t.grad = None  # each run writes its gradients (no accumulation), as a step after zero_grad
            F.conv2d(xs, ws, bs, **args).backward(dy)
        return work

    replays, repeats = row["replays"], row["repeats"]
    times = [time_graph(forward, replays, repeats), time_graph(backward_of(xg, wg, bg), replays, repeats)]
    if "dgrad_ms" in row:  # conv_layers --split: each gradient alone too
        times.append(time_graph(backward_of(xg, w, b), replays, repeats))
        times.append(time_graph(backward_of(x, wg, bg), replays, repeats))
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("loom_json", help="conv_layers' --json file")
    ap.add_argument("--json", default="", help="also append PyTorch's lines here")
    ap.add_argument("--device", default="cuda:0")
    args = ap.parse_args()
    rows = [json.loads(line) for line in open(args.loom_json) if line.strip()]
    rows = [r for r in rows if r.get("framework") == "loom" and r.get("kind") == "conv"]
    if not rows:
        sys.exit(f"{args.loom_json}: no conv_layers lines")
    torch.backends.cudnn.benchmark = True
    device = torch.device(args.device)
    if device.type == "cuda":
        # set_device needs an index; a bare "cuda" means the current device, as in PyTorch.
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.set_device(device)
    print("| model | module | x | weight | stride | groups | uses | precision | Loom fwd | PT fwd | Loom fwd+grads "
          "| PT fwd+grads | fwd+grads PT / Loom |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    sums, split = {}, []
    out = open(args.json, "a") if args.json else None
    for r in rows:
        fwd, both, *parts = time_layer(r, device)
        key = (r["model"], r["precision"], r["layout"], r["x"][0])
        s = sums.setdefault(key, [0.0, 0.0, 0.0, 0.0])
        for i, v in enumerate((r["forward_ms"], fwd, r["with_gradients_ms"], both)):
            s[i] += v * r["uses"]
        shape = lambda v: "x".join(map(str, v))
        print(f"| {r['model']} | {r['module']} | {shape(r['x'])} | {shape(r['weight'])} | {r['stride'][0]} "
              f"| {r['groups']} | {r['uses']} | {r['precision']} | {r['forward_ms']:.4f} | {fwd:.4f} "
              f"| {r['with_gradients_ms']:.4f} | {both:.4f} | {both / r['with_gradients_ms']:.2f}x |")
        if parts:
            split.append((r, parts))
        if out:
            line = dict(r, framework="torch", device=str(device), forward_ms=fwd, with_gradients_ms=both)
            if parts:
                line.update(dgrad_ms=parts[0], wgrad_ms=parts[1])
            out.write(json.dumps(line) + "\n")
    for (model, precision, layout, batch), (lf, pf, lb, pb) in sums.items():
        print(f"\n{model} batch {batch} {precision} {layout}, per step (each layer x its uses): forward Loom "
              f"{lf:.4f} ms, PyTorch {pf:.4f}; with gradients Loom {lb:.4f}, PyTorch {pb:.4f} "
              f"(PyTorch / Loom {pb / lb:.2f}x)")
    if split:
        print("\nEach gradient alone (ms; the forward included, as in fwd+grads):\n")
        print("| module | Loom fwd+dx | PT fwd+dx | Loom fwd+dw | PT fwd+dw | dx PT / Loom | dw PT / Loom |")
        print("|---|---|---|---|---|---|---|")
        for r, (dgrad, wgrad) in split:
            print(f"| {r['module']} | {r['dgrad_ms']:.4f} | {dgrad:.4f} | {r['wgrad_ms']:.4f} | {wgrad:.4f} "
                  f"| {dgrad / r['dgrad_ms']:.2f}x | {wgrad / r['wgrad_ms']:.2f}x |")


if __name__ == "__main__":
    main()
