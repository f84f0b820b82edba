"""Writes resize_golden.h: interpolate and pad results of PyTorch for the cases
of interpolate_test.cc and pad_test.cc, so those tests check Loom against
PyTorch's index conventions without PyTorch in CI.

  python3 tests/core/ops/resize_golden.py > tests/core/ops/resize_golden.h

x[i] = (i * 37) % 11 - 5 and the upstream gradient g[j] = j % 5 - 2 (row-major),
float64; each case records y = f(x) and dx = d sum(y * g) / dx.
"""
import torch
import torch.nn.functional as F

INTERPOLATE = [
    # name, x shape, kwargs
    ("nearest scale 1.7", (1, 2, 3, 4), dict(scale_factor=1.7, mode="nearest")),
    ("nearest size 5x3", (2, 1, 3, 4), dict(size=(5, 3), mode="nearest")),
    ("nearest scale 0.6x0.5", (1, 1, 5, 6), dict(scale_factor=(0.6, 0.5), mode="nearest")),
    ("nearest scale 2", (1, 1, 3, 2), dict(scale_factor=2, mode="nearest")),
    ("nearest scale 3 recomputed", (1, 1, 2, 3), dict(scale_factor=3, mode="nearest", recompute_scale_factor=True)),
    ("bilinear size 5x7", (1, 2, 3, 4), dict(size=(5, 7), mode="bilinear", align_corners=False)),
    ("bilinear size 5x7 align_corners", (1, 2, 3, 4), dict(size=(5, 7), mode="bilinear", align_corners=True)),
    ("bilinear scale 1.7", (1, 1, 3, 4), dict(scale_factor=1.7, mode="bilinear", align_corners=False)),
    ("bilinear scale 1.7 recomputed", (1, 1, 3, 4), dict(scale_factor=1.7, mode="bilinear", align_corners=False, recompute_scale_factor=True)),
    ("bilinear scale 0.6x0.5", (1, 1, 5, 6), dict(scale_factor=(0.6, 0.5), mode="bilinear", align_corners=False)),
    ("bilinear scale 2.5 align_corners", (1, 1, 2, 3), dict(scale_factor=2.5, mode="bilinear", align_corners=True)),
    ("bilinear size 1x1 align_corners", (1, 1, 3, 4), dict(size=(1, 1), mode="bilinear", align_corners=True)),
    ("bilinear size 2x9 from one row", (1, 1, 1, 4), dict(size=(2, 9), mode="bilinear", align_corners=False)),
]

PAD = [
    # name, x shape, pads, mode, value
    ("constant (1, 2) value 1.5", (1, 2, 3, 4), (1, 2), "constant", 1.5),
    ("constant crop and pad (1, -1, 2, 0)", (1, 2, 3, 4), (1, -1, 2, 0), "constant", 0.0),
    ("constant over channels (0, 0, 0, 0, 1, 1)", (1, 2, 3, 4), (0, 0, 0, 0, 1, 1), "constant", -2.0),
    ("reflect (2, 3, 1, 2)", (1, 2, 3, 4), (2, 3, 1, 2), "reflect", 0.0),
    ("reflect (-1, 2, 2, -1)", (1, 2, 3, 4), (-1, 2, 2, -1), "reflect", 0.0),
    ("reflect (3, 3) of one dim", (2, 1, 4), (3, 3), "reflect", 0.0),
    ("replicate (3, 1, 0, 2)", (1, 2, 3, 4), (3, 1, 0, 2), "replicate", 0.0),
    ("replicate (-2, 3, 4, -1)", (1, 2, 3, 4), (-2, 3, 4, -1), "replicate", 0.0),
    ("replicate (-5, 3) past the edge", (1, 1, 4), (-5, 3), "replicate", 0.0),
]


def inputs(shape):
    n = 1
    for s in shape:
        n *= s
    x = torch.tensor([(i * 37) % 11 - 5 for i in range(n)], dtype=torch.float64).reshape(shape)
    return x.requires_grad_(True)


def upstream(y):
    return torch.tensor([j % 5 - 2 for j in range(y.numel())], dtype=torch.float64).reshape(y.shape)


def values(t):
    return "{" + ", ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist()) + "}"


def shape(s):
    return "{" + ", ".join(str(d) for d in s) + "}"


def options(kw):
    parts = []
    if "size" in kw:
        parts.append(".size = Size2{%d, %d}" % kw["size"])
    if "scale_factor" in kw:
        s = kw["scale_factor"]
        s = s if isinstance(s, tuple) else (s, s)
        parts.append(".scale_factor = Scale2{%r, %r}" % (float(s[0]), float(s[1])))
    parts.append(".mode = InterpolateMode::%s" % ("Nearest" if kw["mode"] == "nearest" else "Bilinear"))
    if kw.get("align_corners"):
        parts.append(".align_corners = true")
    if kw.get("recompute_scale_factor"):
        parts.append(".recompute_scale_factor = true")
    return "{" + ", ".join(parts) + "}"


def main():
    print("// File: tests/core/ops/resize_golden.h")
    print("// PyTorch's interpolate and pad on the cases of interpolate_test.cc and")
    print("// pad_test.cc, written by resize_golden.py (PyTorch %s); do not edit." % torch.__version__)
    print("#pragma once\n\n#include <cstdint>\n#include <vector>\n")
    print('#include "core/ops/interpolate.h"\n#include "core/ops/pad.h"\n')
    print("namespace loom::golden {\n")
    print("struct InterpolateCase {\n  const char* name;\n  Shape x_sizes;\n  InterpolateOptions options;")
    print("  Shape y_sizes;\n  std::vector<double> y, dx;\n};\n")
    print("inline const std::vector<InterpolateCase>& interpolate_cases() {")
    print("  static const std::vector<InterpolateCase> cases = {")
    for name, s, kw in INTERPOLATE:
        x = inputs(s)
        y = F.interpolate(x, **kw)
        y.backward(upstream(y))
        print('      {"%s", %s, %s, %s,\n       %s,\n       %s},' % (
            name, shape(s), options(kw), shape(y.shape), values(y), values(x.grad)))
    print("  };\n  return cases;\n}\n")
    print("struct PadCase {\n  const char* name;\n  Shape x_sizes;\n  std::vector<int64_t> pads;")
    print("  PadMode mode;\n  double value;\n  Shape y_sizes;\n  std::vector<double> y, dx;\n};\n")
    print("inline const std::vector<PadCase>& pad_cases() {")
    print("  static const std::vector<PadCase> cases = {")
    for name, s, pads, mode, value in PAD:
        x = inputs(s)
        y = F.pad(x, pads, mode=mode, value=value) if mode == "constant" else F.pad(x, pads, mode=mode)
        y.backward(upstream(y))
        print('      {"%s", %s, %s, PadMode::%s, %r, %s,\n       %s,\n       %s},' % (
            name, shape(s), shape(pads), mode.capitalize(), value, shape(y.shape), values(y),
            values(x.grad)))
    print("  };\n  return cases;\n}\n")
    print("}  // namespace loom::golden")


if __name__ == "__main__":
    main()
