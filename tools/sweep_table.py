#!/usr/bin/env python3
"""Merges the summary tables that several runs of the parity sweep printed
(tests/core/ops/parity_sweep.h), e.g. one process per seed, into one table.

    python3 tools/sweep_table.py sweep-*.log
"""
import sys


def main(paths):
    rows = {}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if len(cells) != 7 or not cells[2].isdigit():
                    continue
                op, precision, cases, passed, flips, worst, fallback = cells
                row = rows.setdefault((op, precision), [0, 0, 0, 0.0, 0])
                row[0] += int(cases)
                row[1] += int(passed)
                row[2] += int(flips)
                row[3] = max(row[3], float(worst))
                row[4] += int(fallback)
    print("| op | precision | cases | passed | passed with decision flips "
          "| worst error / allowed | ran on the fallback tier |")
    print("|---|---|---|---|---|---|---|")
    total = [0, 0, 0, 0]
    for (op, precision), (cases, passed, flips, worst, fallback) in sorted(rows.items()):
        print(f"| {op} | {precision} | {cases} | {passed} | {flips} | {worst:.3g} | {fallback} |")
        total[0] += cases
        total[1] += passed
        total[2] += flips
        total[3] += fallback
    print(f"| all | | {total[0]} | {total[1]} | {total[2]} | | {total[3]} |")
    return 0 if total[0] == total[1] and total[0] > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
