"""Writes tests/models/testdata/zoo_state_dicts.txt from the PyTorch twins
(models/torch_models.py): per registry row its input, classes and parameter
count, then every state_dict name with its shape, in PyTorch's order. The C++
tests (tests/models/zoo_test.cc) compare Loom's models with it, so CI needs no
torch. Run it after adding or changing a twin (Debian's python3-torch is
enough; torchvision is not needed):

    /usr/bin/python3 tools/zoo_golden.py [--check]

--check compares instead of writing, and exits 1 with the first difference.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "models"))

import torch  # noqa: E402
import torch_models  # noqa: E402

GOLDEN = os.path.join(ROOT, "tests", "models", "testdata", "zoo_state_dicts.txt")


def golden_text():
    lines = ["# Written by tools/zoo_golden.py from models/torch_models.py; do not edit.",
             "# model NAME input C,H,W classes K parameters P, then NAME SHAPE per state_dict entry."]
    for name, row in torch_models.ZOO.items():
        torch.manual_seed(0)
        net = row.build(row.num_classes)
        params = sum(p.numel() for p in net.parameters())
        lines.append(f"model {name} input {','.join(map(str, row.input))} classes {row.num_classes} "
                     f"parameters {params}")
        for key, value in net.state_dict().items():
            lines.append(f"{key} {','.join(map(str, value.shape))}")
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing it")
    a = ap.parse_args(argv)
    text = golden_text()
    if a.check:
        with open(GOLDEN) as f:
            old = f.read()
        if old != text:
            for i, (x, y) in enumerate(zip(old.splitlines(), text.splitlines())):
                if x != y:
                    print(f"{GOLDEN}:{i + 1}: '{x}' but the twins give '{y}'")
                    return 1
            print(f"{GOLDEN}: {len(old.splitlines())} lines but the twins give {len(text.splitlines())}")
            return 1
        return 0
    with open(GOLDEN, "w") as f:
        f.write(text)
    print(f"wrote {GOLDEN}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
