"""Loom vs PyTorch: one markdown table from the JSON lines of both benchmarks.

  python3 compare.py loom.jsonl torch.jsonl [--out table.md]

Reads bench/train_step's lines ("framework": "loom") and torch_bench.py's
("framework": "torch"), in any order and files. Prints the training-step table
(Loom graph and eager, PyTorch eager and torch.compile, ratios, first-step
seconds, peak memory), the Fashion-MNIST time-to-accuracy table, and one line
per issue-5 target: met / missed / not measured, with the numbers.
"""
import argparse, json, sys

# (model, batch, precision, how much faster Loom must be, against which PyTorch modes)
TARGETS = [
    ("mnist_net", 128, "tf32", 10.0, ("eager",)),
    ("lenet5", 128, "tf32", 10.0, ("eager",)),
    ("resnet9", 512, "bf16", 1.3, ("eager", "compile")),
]
TTA_SPEEDUP = 5.0

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
    """The Loom number a ratio uses: the faster graph mode (fused or not), else eager."""
    for modes in (("graph", "graph-unfused"), ("eager", "eager-unfused")):
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

def step_table(table):
    head = ("| model | batch | precision | Loom graph img/s | Loom graph ms/step | Loom eager img/s "
            "| PyTorch eager img/s | PyTorch compile img/s | Loom / eager | Loom / compile "
            "| first step s (Loom / eager / compile) | peak MiB (Loom / PyTorch) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    order = {"lenet5": 0, "mnist_net": 1, "resnet9": 2}
    precisions = {"tf32": 0, "strict": 1, "bf16": 2}
    for key in sorted(table, key=lambda k: (order.get(k[0], 9), k[0], k[1], precisions.get(k[2], 9))):
        runs = table[key]
        best = loom_best(runs)
        eager, compiled = runs.get(("torch", "eager")), runs.get(("torch", "compile"))
        first = " / ".join(cell(runs, f, m, "first_step_s", ".2f")
                           for f, m in (("loom", "graph" if ok(runs.get(("loom", "graph"))) else "eager"),
                                        ("torch", "eager"), ("torch", "compile")))
        peak = " / ".join((fmt(best["peak_mib"], ".1f") if best else "-",
                           cell(runs, "torch", "eager", "peak_mib", ".1f")))
        r_eager, r_compile = ratio(best, eager), ratio(best, compiled)
        lines.append("| " + " | ".join([
            key[0], str(key[1]), key[2],
            cell(runs, "loom", "graph", "img_per_s", ",.0f"), cell(runs, "loom", "graph", "ms_per_step", ".3f"),
            cell(runs, "loom", "eager", "img_per_s", ",.0f"),
            cell(runs, "torch", "eager", "img_per_s", ",.0f"), cell(runs, "torch", "compile", "img_per_s", ",.0f"),
            times(r_eager), times(r_compile),
            first, peak]) + " |")
    return lines

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

def target_lines(table, tta):
    lines = []
    for model, batch, precision, bar, modes in TARGETS:
        runs = table.get((model, batch, precision), {})
        best = loom_best(runs)
        for mode in modes:
            r = ratio(best, runs.get(("torch", mode)))
            what = f"{model} batch {batch} {precision}: Loom >= {bar:g}x PyTorch {mode} img/s"
            if r is None:
                lines.append(f"- not measured: {what}")
            else:
                verdict = "met" if r >= bar else "missed"
                lines.append(f"- {verdict}: {what}: {best['img_per_s']:,.0f} vs {runs[('torch', mode)]['img_per_s']:,.0f} img/s = {r:.2f}x")
    for loom_name, plans in (("loom", "plan files saved by an earlier run"),
                             ("loom-cold", "no plan files: every cuDNN plan built")):
        s = tta_speedup(tta, loom_name)
        what = (f"Fashion-MNIST to 91%: Loom ({plans}) >= {TTA_SPEEDUP:g}x faster than PyTorch eager "
                "(wall clock, data loading included)")
        if s is None:
            reached = {k: v["reached"] for k, v in tta.items()}
            lines.append(f"- not measured: {what} (reached: {reached or 'no runs'})")
        else:
            lines.append(f"- {'met' if s >= TTA_SPEEDUP else 'missed'}: {what}: "
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

def render(records):
    table, tta = index_steps(records), tta_records(records)
    out = ["## Training step (median of repeats, CUDA events)", ""] + step_table(table)
    notes = fallback_lines(records)
    if notes:
        out += [""] + notes
    if tta:
        out += ["", "## Fashion-MNIST time to 91% test accuracy", ""] + tta_table(tta)
    out += ["", "## Issue-5 targets", ""] + target_lines(table, tta)
    return "\n".join(out) + "\n"

def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="JSON-lines files of bench/train_step and torch_bench.py")
    ap.add_argument("--out", default="", help="also write the markdown here")
    a = ap.parse_args(argv)
    text = render(read_records(a.files))
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
