// File: examples/cifar/train.cc
// Trains resnet9 (or another zoo model for 32x32 images) on CIFAR-10 binary batches
// (data_batch_1..5.bin, test_batch.bin) with pad-4 random crops and flips, SGD
// with Nesterov momentum, a one-cycle schedule and label smoothing; --synthetic
// runs the same model on generated data (smoke tests, benchmarks).
//
//   bazel run -c opt //examples/cifar:train -- --data /data/cifar-10-batches-bin
#include "training/flags.h"

namespace {

const char* kUsage = R"(train: trains resnet9 (or another model of the zoo) on CIFAR-10 binary batches.

  --data DIR          folder with data_batch_1..5.bin and test_batch.bin
  --synthetic N       train on N generated 32x32 images instead of --data
  --model NAME        resnet9 (default), or another model listed at the end
  --epochs N          (default 10)
  --batch-size N      (default 512)
  --optimizer NAME    sgd (default: Nesterov momentum 0.9), adam, adamw, rmsprop or adagrad
  --lr X              peak learning rate (default 0.2)
  --weight-decay X    (default 5e-4)
  --label-smoothing X (default 0.2)
  --schedule NAME     onecycle (default), cosine (1 epoch of warmup), step or none
  --device NAME       auto (default), cpu, cuda or cuda:k
  --precision NAME    tf32 (default), strict or bf16
  --seed N, --limit N, --save PATH, --resume PATH, --metrics PATH, --plot PATH.png,
  --export-onnx PATH,
  --target-accuracy X, --no-cuda-graph, --no-fuse, --autotune, --profile N, --explain,
  --fusion-report, --allow-nonfinite-loss, --detect-anomaly,
  --distributed (mpirun -np N ...: --batch-size per rank),
  -h, --help
                      as in the MNIST trainer (examples/mnist:train --help)
Relative paths are relative to the current directory, under `bazel run` too.
)";

}  // namespace

int main(int argc, char** argv) {
  loom::training::TrainConfig defaults{.dataset = "cifar10",
                                       .data = "",
                                       .model = "resnet9",
                                       .epochs = 10,
                                       .batch_size = 512,
                                       .optimizer = "sgd",
                                       .lr = 0.2,
                                       .weight_decay = 5e-4,
                                       .label_smoothing = 0.2,
                                       .crop_padding = 4,
                                       .flip = true,
                                       .schedule = "onecycle"};
  return loom::training::train_main(argc, argv, defaults, kUsage);
}
