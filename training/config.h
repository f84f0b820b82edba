// File: training/config.h
// What a training run is: TrainConfig (every flag of the example trainers),
// what it returns (EpochResult, TrainResult), the precision scope it runs
// under, and the flags that decide what it computes as text (for checkpoints
// and metrics files). training/trainer.h runs it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/device.h"
#include "core/numerics.h"
#include "core/state_dict.h"

namespace loom::training {

inline constexpr const char* kFashionMnist = "/usr/share/datasets/fashion-mnist";

struct TrainConfig {
  std::string dataset = "mnist";     // "mnist" (any MNIST-format IDX folder) or "cifar10"
  std::string data = kFashionMnist;  // the folder; unused with synthetic_images
  int64_t synthetic_images = 0;      // > 0: train on generated data of the dataset's shape
  std::string model = "mnist_net";   // a zoo model (models/registry.h) of the dataset's image size
  int epochs = 5;
  int64_t batch_size = 128;
  std::string optimizer = "adam";    // adagrad, adam, adamw, rmsprop, sgd
  double lr = 1e-3;
  double momentum = 0.9;             // sgd only (with Nesterov)
  double weight_decay = 0.0;
  double label_smoothing = 0.0;
  int64_t crop_padding = 0;          // random crop with this zero padding per side
  bool flip = false;                 // random horizontal flip
  std::string schedule = "none";     // none, step, cosine, onecycle
  Device device = cuda_available() ? Device::cuda() : Device::cpu();
  std::string precision = "tf32";    // tf32, strict, bf16 (autocast: bf16 activations, fp32 weights)
  bool cuda_graph = true;            // GPU: capture each training step once per shape, then replay
  bool fuse = true;                  // nn::fuse: conv/bn/linear + relu as fused cuDNN graphs
  bool autotune = false;             // cuDNN plans: time the candidates (cudnn.benchmark)
  double target_accuracy = 0;        // > 0: stop after the first epoch whose test accuracy reaches it
  int64_t profile_steps = 0;         // > 0: time that many eager steps of epoch 1 per layer, print the table
  uint64_t seed = 0;
  int64_t limit = 0;                 // train on the first `limit` images (0: all)
  int64_t test_limit = 0;            // evaluate on the first `test_limit` test images (0: all)
  // checkpoint out, checkpoint in, CSV/JSONL metrics (.csv or .jsonl); "= {}" lets a
  // designated initializer leave them out without -Wmissing-field-initializers
  std::string save = {}, resume = {}, metrics = {};
  std::string plot = {};             // a PNG of the training curves, drawn at the end (tools/plot_metrics.py)
  std::string export_onnx = {};      // the trained model as ONNX, written at the end (onnx/zoo.h)
  bool progress = true;              // progress on stderr: redrawn on a terminal, a line per 10% otherwise
  bool detect_anomaly = false;       // AnomalyGuard over training: the first op making NaN/inf throws
  bool distributed = false;          // data-parallel under mpirun (training/distributed.h)
  bool stop_on_nonfinite_loss = true;  // false: skip steps whose loss is NaN/inf and go on
};

struct EpochResult {
  int epoch = 0;
  // Means over every batch of the epoch, weighted by batch size (a skipped
  // step's non-finite loss is left out of the loss); as a PyTorch loop sums
  // loss.item() * batch and the correct predictions.
  double train_loss = 0, train_accuracy = 0;
  double test_loss = 0, test_accuracy = 0;  // the same criterion, in eval mode
  double images_per_second = 0, seconds = 0;
  double elapsed_seconds = 0;  // since train() began: data loading, plan building and evaluation included
  int64_t skipped_steps = 0;   // steps whose loss was NaN or inf: their updates were skipped
};

struct TrainResult {
  std::vector<EpochResult> epochs;  // the epochs this call ran (after a resume: the rest)
  StateDict model;                  // the final weights
  std::vector<std::string> warnings;  // also printed: flags that changed since the resumed checkpoint
};

// The numerics of a precision name for the scope's lifetime: "tf32" (PyTorch's
// default for convolutions), "strict" (IEEE fp32) or "bf16" (mixed precision:
// autocast on the GPU, bf16 activations and fp32 weights; the CPU computes in
// fp32). ValueError for another name. The trainer and the benchmark share it.
class PrecisionScope {
 public:
  PrecisionScope(const std::string& precision, Device device, bool autotune);

 private:
  NumericsGuard numerics_;
  AutocastGuard autocast_;
};

// The flags that decide what a run computes (not where or how fast), as a
// checkpoint stores them: {"--model", "resnet9"}, ... and {"dataset", "cifar10"}.
std::vector<std::pair<std::string, std::string>> run_flags(const TrainConfig& c);

// Those flags and the device as a command line: the metrics file's flags column.
std::string flags_text(const TrainConfig& c);

// The precision that runs: on the CPU every name computes in IEEE fp32
// ("fp32 (the CPU has no tf32)").
std::string precision_shown(const TrainConfig& c);

}  // namespace loom::training
