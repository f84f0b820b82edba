// File: examples/mnist/train.cc
// Trains mnist_net (or lenet5, vit_tiny: the zoo's models of its image size) on an
// MNIST-format folder (Fashion-MNIST from Debian's dataset-fashion-mnist by
// default), on the GPU when there is one and on the CPU otherwise. Prints a
// progress line per epoch and the test accuracy after each; --metrics writes
// them as CSV or JSONL; --save/--resume keep a full training checkpoint.
//
//   bazel run -c opt //examples/mnist:train -- --epochs 5 --device auto
#include "training/flags.h"

namespace {

const char* kUsage = R"(train: trains mnist_net (or another model of the zoo) on MNIST-format data.

  --data DIR          folder with train-/t10k- images and labels (IDX, plain or .gz)
                      (default /usr/share/datasets/fashion-mnist)
  --model NAME        mnist_net (default), or another model listed at the end
  --epochs N          (default 5)
  --batch-size N      (default 128)
  --optimizer NAME    adam (default), adamw, rmsprop, adagrad or sgd (Nesterov momentum 0.9)
  --lr X              (default 1e-3)
  --weight-decay X    (default 0)
  --schedule NAME     none (default), step, cosine (1 epoch of warmup) or onecycle
  --device NAME       auto (default: cuda when a GPU is usable), cpu, cuda or cuda:k
  --precision NAME    tf32 (default, PyTorch's convolution default), strict or bf16
                      (bf16 needs a GPU; the CPU computes every one in fp32)
  --seed N            initialisation and shuffling (default 0)
  --limit N           train on the first N training images only
  --synthetic N       train on N generated images instead of --data
  --save PATH         write a training checkpoint after every epoch (atomically)
  --resume PATH       continue from a checkpoint written by --save (flags that
                      differ from the checkpoint's run are listed; yours win)
  --metrics PATH      per-epoch metrics, appended: PATH ends in .csv or .jsonl;
                      a row per epoch with the run id, the flags and the
                      time since the start (a CSV's first line names the columns)
  --plot PATH.png     at the end, draw the training curves (loss and accuracy
                      per epoch, train vs test); needs python3-matplotlib
                      ('bash tools/setup.sh python3-matplotlib'; LOOM_PYTHON
                      names another Python), checked before training
  --export-onnx PATH  at the end, write the trained model as ONNX (opset 17,
                      dynamic batch; input 'input', output 'output': docs/onnx.md)
  --detect-anomaly    check every op's forward and backward for NaN/inf and stop
                      at the first, naming the op and its module (slow: steps
                      run eagerly and each op's values are read back)
  --allow-nonfinite-loss
                      skip (and count) steps whose loss is NaN or inf and go on;
                      by default such a loss stops training with its step number
  --target-accuracy X stop after the first epoch whose test accuracy reaches X
  --no-cuda-graph     run every training step eagerly (default on the GPU: each
                      step is captured once per batch shape into a CUDA graph)
  --no-fuse           keep conv/batch-norm/linear and their ReLU as separate ops
                      (default: nn::fuse runs them as fused cuDNN graphs)
  --autotune          time cuDNN's candidate plans once per shape and keep the
                      fastest (cudnn.benchmark; the choice is saved in the plan
                      files). Off by default: runtime-compiled candidates make
                      the first step take tens of seconds
  --profile N         time N eager steps of epoch 1 per layer (forward, backward,
                      share of the step) and print the table, the cuDNN plan
                      cache counters and the peak GPU memory
  --explain           print the cuDNN plan cache at the end
  --fusion-report     print the fused blocks at the end: engines, why others did not
                      fuse, and measured fused vs unfused times (docs/fusion.md)
  --distributed       data-parallel over the ranks of mpirun, one per GPU
                      (mpirun -np N ... --distributed): --batch-size is per
                      rank, the global batch N times it; rank 0 prints and
                      saves (see the README's "Several GPUs and hosts")
  -h, --help          this text (every flag also takes --flag=value)
Relative paths are relative to the current directory, under `bazel run` too.
)";

}  // namespace

int main(int argc, char** argv) {
  return loom::training::train_main(argc, argv, {}, kUsage);
}
