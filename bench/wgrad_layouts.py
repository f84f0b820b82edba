"""cuDNN's TF32 weight gradient and forward of resnet18_cifar's 3x3 layers (batch 512), channels-last against
NCHW operands, through PyTorch, and the copies an NCHW weight gradient of channels-last tensors would add.

  python3 bench/wgrad_layouts.py      # on a GPU host with PyTorch; us per call, CUDA events, best of 20

Loom's tf32 weight gradients of 64+ channels run cuDNN's NHWC kernels at about half their forward's rate
(docs/gpu_and_precision.md); this asks whether the other layout, whose pixels (the reduction) are
contiguous, would be faster.
"""
import torch

torch.backends.cudnn.benchmark = True
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


def best_us(fn, runs=20):
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); fn(); end.record(); end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3)
    return best


def layer(c, hw, stride):
    k = c if stride == 1 else 2 * c
    x = torch.randn(512, c, hw, hw, device="cuda")
    w = torch.randn(k, c, 3, 3, device="cuda")
    dy = torch.randn_like(torch.nn.functional.conv2d(x, w, stride=stride, padding=1))
    times = {}
    for name, layout in (("nhwc", torch.channels_last), ("nchw", torch.contiguous_format)):
        xl, dl, wl = (t.contiguous(memory_format=layout) for t in (x, dy, w))
        wgrad = lambda: torch.ops.aten.convolution_backward(dl, xl, wl, None, [stride] * 2, [1, 1], [1, 1], False,
                                                             [0, 0], 1, [False, True, False])
        forward = lambda: torch.nn.functional.conv2d(xl, wl, stride=stride, padding=1)
        times[name] = (best_us(wgrad), best_us(forward))
    xc, dc = x.contiguous(memory_format=torch.channels_last), dy.contiguous(memory_format=torch.channels_last)
    copies = best_us(lambda: (xc.contiguous(), dc.contiguous()))
    print(f"C {c} K {k} {hw}x{hw} stride {stride}: wgrad nhwc {times['nhwc'][0]:.1f} nchw {times['nchw'][0]:.1f} | "
          f"forward nhwc {times['nhwc'][1]:.1f} nchw {times['nchw'][1]:.1f} | x and dy to nchw {copies:.1f}",
          flush=True)


if __name__ == "__main__":
    for c, hw, stride in ((64, 32, 1), (128, 16, 1), (256, 8, 1), (512, 4, 1), (64, 32, 2)):
        layer(c, hw, stride)
