#!/usr/bin/env python3
"""Draws training curves from a trainer's metrics file (--metrics, CSV or JSONL).

One PNG with two panels, per epoch, train beside test: the loss (the training
criterion; on the training set the epoch's mean) and the accuracy.

    python3 tools/plot_metrics.py metrics.csv --out curves.png [--run-id ID]

A metrics file may hold several runs (each appends); the last run is drawn
unless --run-id names another. `--check` only imports matplotlib: the trainers
run it before training when --plot is given. Needs Debian's python3-matplotlib
(bash tools/setup.sh python3-matplotlib).
"""
import argparse
import csv
import json
import math
import sys


def read_rows(path):
    with open(path, newline="") as f:
        if path.endswith(".jsonl"):
            return [json.loads(line) for line in f if line.strip()]
        return list(csv.DictReader(f))


def number(value):
    # JSONL writes null for NaN; CSV writes "nan".
    return math.nan if value is None else float(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", nargs="?", help="a .csv or .jsonl file written by --metrics")
    parser.add_argument("--out", help="the PNG to write")
    parser.add_argument("--run-id", help="the run to draw (default: the file's last)")
    parser.add_argument("--title", default="", help="a title above the panels")
    parser.add_argument("--check", action="store_true", help="only check that matplotlib imports")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_metrics: matplotlib is missing: bash tools/setup.sh python3-matplotlib")
    if args.check:
        return
    if not args.metrics or not args.out:
        parser.error("give the metrics file and --out PNG")

    rows = read_rows(args.metrics)
    if not rows:
        sys.exit(f"plot_metrics: {args.metrics} has no rows")
    run_id = args.run_id or rows[-1]["run_id"]
    rows = [r for r in rows if r["run_id"] == run_id]
    if not rows:
        sys.exit(f"plot_metrics: no rows of run {run_id} in {args.metrics}")
    epochs = [int(r["epoch"]) for r in rows]

    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(10, 4))
    loss_ax.plot(epochs, [number(r["train_loss"]) for r in rows], "o-", label="train")
    loss_ax.plot(epochs, [number(r["test_loss"]) for r in rows], "s-", label="test")
    loss_ax.set(xlabel="epoch", ylabel="loss (cross entropy)", title="loss")
    acc_ax.plot(epochs, [number(r["train_accuracy"]) for r in rows], "o-", label="train")
    acc_ax.plot(epochs, [number(r["test_accuracy"]) for r in rows], "s-", label="test")
    acc_ax.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
    for ax in (loss_ax, acc_ax):
        ax.legend()
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(f"{args.title}  (run {run_id})".strip())
    fig.tight_layout()
    fig.savefig(args.out, dpi=100)


if __name__ == "__main__":
    main()
