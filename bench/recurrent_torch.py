"""One training step of an LSTM, GRU or RNN in PyTorch, as bench/recurrent.cc
times it in Loom: batch_first, MSE loss on the output, SGD; eager (cuDNN's
RNN kernels) and the whole step captured in a CUDA graph. One JSON line per
precision.

    python3 recurrent_torch.py --mode lstm --seq 50 --batch 64 --input 128 --hidden 256 --layers 2
"""
import argparse
import json
import statistics

import torch

from conv_layers_torch import time_graph  # the whole step captured once, then replayed


def make_step(args, precision, x, y):
    torch.manual_seed(1)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[args.mode]
    net = cls(args.input, args.hidden, num_layers=args.layers, batch_first=True).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out, _ = net(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
        return loss

    return step


def time_eager(run, steps):
    for _ in range(10):
        run()
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / steps)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="lstm", choices=["lstm", "gru", "rnn"])
    for name, default in [("seq", 50), ("batch", 64), ("input", 128), ("hidden", 256), ("layers", 2),
                          ("steps", 50)]:
        parser.add_argument("--" + name, type=int, default=default)
    parser.add_argument("--precisions", default="tf32,bf16")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    for precision in args.precisions.split(","):
        x = torch.randn(args.batch, args.seq, args.input, device="cuda")
        y = torch.randn(args.batch, args.seq, args.hidden, device="cuda")
        eager = time_eager(make_step(args, precision, x, y), args.steps)
        graph = time_graph(make_step(args, precision, x, y), args.steps, 3)
        print(json.dumps({"framework": "torch", "mode": args.mode, "seq": args.seq, "batch": args.batch,
                          "input": args.input, "hidden": args.hidden, "layers": args.layers,
                          "precision": precision, "eager_ms": round(eager, 3), "graph_ms": round(graph, 3)}))


if __name__ == "__main__":
    main()
