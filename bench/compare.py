"""Loom vs PyTorch: one markdown table from the JSON lines of both benchmarks.

  python3 compare.py loom.jsonl torch.jsonl [--out table.md]

Reads bench/train_step's lines ("framework": "loom") and torch_bench.py's
("framework": "torch"), in any order and files. Prints the training-step table
(Loom's best mode against each PyTorch mode and against the best of them, the
achieved TFLOP/s and share of the GPU's dense peak for the precision), the
first-step and memory table, the Fashion-MNIST time-to-accuracy table, and one
line per speed or memory target: met / missed / not measured, with the numbers.
"""
import argparse, json, sys

TORCH_MODES = ("eager", "compile", "max-autotune", "graph")
# Dense tensor-core peaks (strict fp32 runs on the FP32 units), TFLOP/s, from the datasheets.
PEAKS = {
    "h100-sxm": {"bf16": 989.4, "tf32": 494.7, "strict": 66.9},
    "h100-pcie": {"bf16": 756.0, "tf32": 378.0, "strict": 51.2},
    "h200": {"bf16": 989.4, "tf32": 494.7, "strict": 66.9},
}
BEST_SPEEDUP = 1.5        # the reference models against the best PyTorch mode
ZOO_SPEEDUP = 1.2         # the other zoo models (models/registry.h) against the best PyTorch mode
REFERENCE_MODELS = ("lenet5", "mnist_net", "resnet9")
GRAPH_SPEEDUP_SMALL = 2.0  # lenet5 and mnist_net at batch 128 against PyTorch's CUDA graph
RESNET9_BF16_MS = 3.2      # resnet9 batch 512 bf16, ms per step
STRICT_SPEEDUP = 1.0       # strict fp32 against PyTorch strict (best mode)
# Fashion-MNIST to 91%, wall clock, against PyTorch eager: with plan files, and cold.
TTA_SPEEDUP = {"loom": 8.0, "loom-cold": 5.0}

def read_records(paths):
    records = []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"compare.py: {path}:{n}: not a JSON line ({e})")
    return records

def index_steps(records):
    """(model, batch, precision) -> {("loom", "graph"): record, ("torch", "eager"): record, ...}"""
    table = {}
    for r in records:
        if r.get("kind") != "step":
            continue
        key = (r["model"], int(r["batch"]), r["precision"])
        table.setdefault(key, {})[(r["framework"], r["mode"])] = r
    return table

def ok(r):
    return r is not None and "error" not in r and r.get("img_per_s", 0) > 0

def fmt(value, spec):
    return "-" if value is None else format(value, spec)

def times(r):
    return "-" if r is None else f"{r:.2f}x"

def loom_best(runs):
    """The Loom number a ratio uses: the fastest graph mode (traced, fused or not), else eager."""
    for modes in (("graph-traced", "graph", "graph-unfused"), ("eager", "eager-unfused")):
        measured = [runs[("loom", m)] for m in modes if ok(runs.get(("loom", m)))]
        if measured:
            return max(measured, key=lambda r: r["img_per_s"])
    return None

def ratio(loom, torch):
    return loom["img_per_s"] / torch["img_per_s"] if ok(loom) and ok(torch) else None

def cell(runs, framework, mode, field, spec):
    r = runs.get((framework, mode))
    if r is not None and "error" in r:
        return "error"
    return fmt(r.get(field) if ok(r) else None, spec)

def sorted_keys(table):
    order = {"lenet5": 0, "mnist_net": 1, "resnet9": 2}
    precisions = {"tf32": 0, "strict": 1, "bf16": 2}
    return sorted(table, key=lambda k: (order.get(k[0], 9), k[0], k[1], precisions.get(k[2], 9)))

def torch_best(runs):
    """The fastest PyTorch mode that ran: (mode, record), or (None, None)."""
    measured = [(m, runs[("torch", m)]) for m in TORCH_MODES if ok(runs.get(("torch", m)))]
    return max(measured, key=lambda mr: mr[1]["img_per_s"]) if measured else (None, None)

def flop_per_image(runs):
    """Training FLOPs per image, counted by torch_bench.py from the layer shapes."""
    for (framework, _), r in runs.items():
        if framework == "torch" and r.get("train_flop_per_image"):
            return r["train_flop_per_image"]
    return None

def tflops(r, flop):
    return r["img_per_s"] * flop / 1e12 if ok(r) and flop else None

def step_table(table, peaks):
    head = ("| model | batch | precision | Loom ms/step | PyTorch eager | compile | max-autotune | CUDA graph "
            "| best PyTorch | Loom / best | Loom TFLOP/s | % of peak | best PyTorch TFLOP/s |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for key in sorted_keys(table):
        runs = table[key]
        loom = loom_best(runs)
        mode, best = torch_best(runs)
        flop = flop_per_image(runs)
        loom_tf, peak = tflops(loom, flop), peaks.get(key[2])
        share = 100 * loom_tf / peak if loom_tf and peak else None
        lines.append("| " + " | ".join([
            key[0], str(key[1]), key[2],
            fmt(loom["ms_per_step"], ".3f") + (f" ({loom['mode']})" if loom["mode"] != "graph" else "") if loom else "-",
            *(cell(runs, "torch", m, "ms_per_step", ".3f") for m in TORCH_MODES),
            mode or "-", times(ratio(loom, best)),
            fmt(loom_tf, ".1f"), fmt(share, ".1f"), fmt(tflops(best, flop), ".1f")]) + " |")
    return lines

def steady_peak(r):
    """MiB the timed steps peaked at (older records: the whole run's peak)."""
    return r.get("steady_peak_mib", r["peak_mib"])

def peak_cell(runs, framework, mode):
    """"timed steps (whole run)" peak MiB of one mode."""
    r = runs.get((framework, mode))
    if r is not None and "error" in r:
        return "error"
    return f"{steady_peak(r):.1f} ({r['peak_mib']:.1f})" if ok(r) else "-"

def start_table(table):
    head = ("| model | batch | precision | first step s: Loom | eager | compile | max-autotune | CUDA graph "
            "| peak MiB, timed steps (whole run): Loom | eager | compile | max-autotune | CUDA graph |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for key in sorted_keys(table):
        runs = table[key]
        loom = loom_best(runs)
        lines.append("| " + " | ".join([
            key[0], str(key[1]), key[2], fmt(loom["first_step_s"], ".2f") if loom else "-",
            *(cell(runs, "torch", m, "first_step_s", ".2f") for m in TORCH_MODES),
            peak_cell(runs, "loom", loom["mode"]) if loom else "-",
            *(peak_cell(runs, "torch", m) for m in TORCH_MODES)]) + " |")
    return lines

def torch_leanest(runs):
    """The PyTorch mode whose timed steps peaked lowest: (mode, record), or (None, None)."""
    measured = [(m, runs[("torch", m)]) for m in TORCH_MODES if ok(runs.get(("torch", m)))]
    return min(measured, key=lambda mr: steady_peak(mr[1])) if measured else (None, None)

def flop_lines(table):
    seen = {}
    for key in sorted_keys(table):
        flop = flop_per_image(table[key])
        if flop and key[0] not in seen:
            seen[key[0]] = flop
    return [f"- {model}: {flop / 1e9:.4f} GFLOP per image per training step "
            "(3x the forward convolution and linear FLOPs)" for model, flop in seen.items()]

def tta_records(records):
    return {r["framework"]: r for r in records if r.get("kind") == "tta"}

def tta_table(tta):
    lines = ["| framework | reached 91% | epochs | seconds (trainer clock) | seconds (wall, data loading included) | final test accuracy |",
             "|---|---|---|---|---|---|"]
    for name in ("loom-cold", "loom", "torch"):
        r = tta.get(name)
        if r is None:
            continue
        lines.append(f"| {name} | {'yes' if r['reached'] else 'no'} | {r['epochs']} | {r['seconds']:.2f} "
                     f"| {r['wall_seconds']:.2f} | {r['accuracy']:.4f} |")
    return lines

def tta_speedup(tta, loom_name="loom"):
    loom, torch = tta.get(loom_name), tta.get("torch")
    if not loom or not torch or not loom["reached"] or not torch["reached"]:
        return None
    return torch["wall_seconds"] / loom["wall_seconds"]

def speed_line(what, value, bar, higher_is_better, detail):
    if value is None:
        return f"- not measured: {what}"
    met = value >= bar if higher_is_better else value <= bar
    return f"- {'met' if met else 'missed'}: {what}: {detail}"

def target_lines(table, tta):
    lines = []
    for key in sorted_keys(table):
        runs = table[key]
        loom = loom_best(runs)
        mode, best = torch_best(runs)
        r = ratio(loom, best)
        name = f"{key[0]} batch {key[1]} {key[2]}"
        detail = f"{loom['ms_per_step']:.3f} vs {best['ms_per_step']:.3f} ms ({mode}) = {r:.2f}x" if r else ""
        bar = STRICT_SPEEDUP if key[2] == "strict" else BEST_SPEEDUP if key[0] in REFERENCE_MODELS else ZOO_SPEEDUP
        lines.append(speed_line(f"{name}: Loom >= {bar:g}x the best PyTorch mode", r, bar, True, detail))
        lean_mode, lean = torch_leanest(runs)
        m = steady_peak(loom) / steady_peak(lean) if ok(loom) and lean and steady_peak(lean) > 0 else None
        detail = f"{steady_peak(loom):,.0f} vs {steady_peak(lean):,.0f} MiB ({lean_mode}) = {m:.2f}x" if m else ""
        lines.append(speed_line(f"{name}: Loom's peak memory in the timed steps <= PyTorch's lowest", m, 1.0, False,
                                detail))
        if key[0] in ("lenet5", "mnist_net") and key[1] == 128 and key[2] != "strict":
            graph = runs.get(("torch", "graph"))
            g = ratio(loom, graph)
            detail = f"{loom['ms_per_step']:.3f} vs {graph['ms_per_step']:.3f} ms = {g:.2f}x" if g else ""
            lines.append(speed_line(f"{name}: Loom >= {GRAPH_SPEEDUP_SMALL:g}x PyTorch's CUDA graph",
                                    g, GRAPH_SPEEDUP_SMALL, True, detail))
        if key == ("resnet9", 512, "bf16"):
            ms = loom["ms_per_step"] if ok(loom) else None
            lines.append(speed_line(f"{name}: <= {RESNET9_BF16_MS:g} ms per step", ms, RESNET9_BF16_MS, False,
                                    f"{ms:.3f} ms" if ms else ""))
    for loom_name, plans in (("loom", "plan files saved by an earlier run"),
                             ("loom-cold", "no plan files: every cuDNN plan built")):
        s = tta_speedup(tta, loom_name)
        bar = TTA_SPEEDUP[loom_name]
        what = (f"Fashion-MNIST to 91%: Loom ({plans}) >= {bar:g}x faster than PyTorch eager "
                "(wall clock, data loading included)")
        if s is None:
            reached = {k: v["reached"] for k, v in tta.items()}
            lines.append(f"- not measured: {what} (reached: {reached or 'no runs'})")
        else:
            lines.append(f"- {'met' if s >= bar else 'missed'}: {what}: "
                         f"{tta['torch']['wall_seconds']:.2f} s vs {tta[loom_name]['wall_seconds']:.2f} s = {s:.2f}x")
    return lines

def fallback_lines(records):
    """Graph-mode configurations that ran eagerly, and failed configurations."""
    lines = []
    for r in records:
        where = f"{r.get('framework')} {r.get('model')} batch {r.get('batch')} {r.get('precision')} {r.get('mode')}"
        if r.get("kind") == "step" and r.get("fallback_reason"):
            lines.append(f"- {where} ran eagerly: {r['fallback_reason']}")
        if r.get("kind") == "step" and "error" in r:
            lines.append(f"- {where} failed: {r['error']}")
    return lines

def render(records, peaks):
    table, tta = index_steps(records), tta_records(records)
    out = ["## Training step: ms per step (median of repeats, CUDA events)", ""] + step_table(table, peaks)
    out += [""] + flop_lines(table)
    notes = fallback_lines(records)
    if notes:
        out += [""] + notes
    out += ["", "## First step (from model construction) and peak memory", ""] + start_table(table)
    if tta:
        out += ["", "## Fashion-MNIST time to 91% test accuracy", ""] + tta_table(tta)
    out += ["", "## Targets", ""] + target_lines(table, tta)
    return "\n".join(out) + "\n"

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="JSON-lines files of bench/train_step and torch_bench.py")
    ap.add_argument("--out", default="", help="also write the markdown here")
    ap.add_argument("--gpu", choices=sorted(PEAKS), default="h100-sxm", help="whose dense peaks the %% column uses")
    a = ap.parse_args(argv)
    text = render(read_records(a.files), PEAKS[a.gpu])
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
