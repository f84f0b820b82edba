// File: bench/conv_layers.cc
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/conv_layers.h"

#include "bench/options.h"
#include "bench/stopwatch.h"
#include "bench/summary.h"
#include "core/error.h"
#include "core/json.h"
#include "core/numerics.h"
#include "core/ops/ops.h"
#include "core/step_boundary.h"
#include "core/trace.h"
#include "models/registry.h"

#ifdef LOOM_WITH_CUDA
#include "core/cuda/graph.h"
#endif

namespace loom::bench {
namespace {

std::string shape_text(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Milliseconds per run of `work`, the median of `repeats` timings of `replays` runs each: a
// CUDA graph of one run, replayed, on the GPU; `work` itself with the steady clock on the CPU.
double time_work(const std::function<void()>& work, const ConvLayersOptions& o) {
  std::function<void()> run = work;
#ifdef LOOM_WITH_CUDA
  cuda::CudaGraph graph;
  if (o.device.is_cuda()) {
    graph.capture(work);
    graph.replay();  // the graph's first launch uploads it
    run = [&graph] { graph.replay(); };
  }
#endif
  Stopwatch watch(o.device);
  std::vector<double> ms;
  for (int r = 0; r < o.repeats; ++r) {
    watch.start();
    for (int i = 0; i < o.replays; ++i) run();
    ms.push_back(watch.stop_ms() / o.replays);
  }
  return median(ms);
}

// conv(x, w, b) forward and backward through the operands that require grad; each run
// writes fresh gradients (a handle: the gradient is the shared tensor's), as a step after zero_grad.
std::function<void()> backward_work(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
                                    const Conv2dOptions& options) {
  return [=] {
    for (Tensor t : {x, w, b}) {
      if (t.defined() && t.requires_grad()) t.set_grad(Tensor());
    }
    conv2d(x, w, b, options).backward(dy);
  };
}

Tensor leaf(const Tensor& t, bool requires_grad) {
  return t.defined() ? t.detach().requires_grad_(requires_grad) : Tensor();
}

// ", \"dgrad_ms\": ..., \"wgrad_ms\": ..." when the gradients were timed alone, else "".
std::string split_fields(const LayerTimes& t) {
  if (!t.dgrad_ms || !t.wgrad_ms) return "";
  return fmt::format(", \"dgrad_ms\": {}, \"wgrad_ms\": {}", json_number(*t.dgrad_ms), json_number(*t.wgrad_ms));
}

// The layers the options ask for: all, the depthwise ones, or the one module's.
std::vector<ConvLayer> chosen_layers(const ConvLayersOptions& o) {
  std::vector<ConvLayer> layers = model_convs(o.model, o.batch);
  std::vector<std::string> modules;
  for (const ConvLayer& l : layers) modules.push_back(l.module);
  std::erase_if(layers, [&o](const ConvLayer& l) {
    return (o.depthwise && !l.depthwise()) || (!o.module.empty() && l.module != o.module);
  });
  LOOM_CHECK(o.module.empty() || !layers.empty(), ValueError,
             "[conv_layers] --module {}: no distinct convolution of {} is first run by that module; these are: {}",
             o.module, o.model, fmt::join(modules, ", "));
  return layers;
}

std::string split_text(const LayerTimes& t) {
  if (!t.dgrad_ms || !t.wgrad_ms) return "";
  return fmt::format(" (dx alone {:.4f}, dw alone {:.4f})", *t.dgrad_ms, *t.wgrad_ms);
}

}  // namespace

const char* const kConvLayersUsage = R"(usage: conv_layers --model M [flags]
  --model M        a zoo model (models/registry.h)
  --batch N        batch size (default 128)
  --precision P    tf32 (default), strict (no TF32) or bf16 (bfloat16 operands)
  --layout L       nhwc (default) or nchw
  --depthwise      only the depthwise convolutions (groups = C > 1)
  --module NAME    only the convolution module NAME is listed under (e.g. layer3.0.conv2)
  --split          also time each gradient alone: forward + dx, forward + dw (and db)
  --plans          print the cuDNN plan table (engine and knobs of each plan) at the end
  --replays R      replays per timed repeat (default 50)
  --repeats K      timed repeats; the median is kept (default 5)
  --device D       cuda, cuda:k or cpu (default cuda when available)
  --json PATH      also append one JSON object per convolution to PATH
)";

ConvLayersOptions parse_conv_layers_flags(int argc, char** argv) {
  ConvLayersOptions o;
  o.device = cuda_available() ? Device::cuda() : Device::cpu();
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    static const std::map<std::string, bool ConvLayersOptions::*> kSwitches = {
        {"--depthwise", &ConvLayersOptions::depthwise},
        {"--split", &ConvLayersOptions::split},
        {"--plans", &ConvLayersOptions::plans}};
    if (auto it = kSwitches.find(flag); it != kSwitches.end()) {
      o.*(it->second) = true;
      continue;
    }
    static const std::set<std::string> kValued = {"--model",   "--batch",  "--precision", "--layout", "--replays",
                                                  "--repeats", "--device", "--json",      "--module"};
    LOOM_CHECK(kValued.contains(flag), ValueError, "[conv_layers] unknown flag {}", flag);
    LOOM_CHECK(i + 1 < argc, ValueError, "[conv_layers] {} needs a value", flag);
    const std::string value = argv[++i];
    if (flag == "--model") o.model = value;
    else if (flag == "--batch") o.batch = parse_count(flag, value, 1);
    else if (flag == "--precision") o.precision = value;
    else if (flag == "--layout") o.layout = value;
    else if (flag == "--replays") o.replays = parse_count(flag, value, 1);
    else if (flag == "--repeats") o.repeats = parse_count(flag, value, 1);
    else if (flag == "--device") o.device = Device::parse(value);
    else if (flag == "--module") o.module = value;
    else o.json = value;
  }
  LOOM_CHECK(!o.model.empty(), ValueError, "[conv_layers] --model is required");
  LOOM_CHECK(o.precision == "tf32" || o.precision == "strict" || o.precision == "bf16", ValueError,
             "[conv_layers] --precision must be tf32, strict or bf16, got '{}'", o.precision);
  LOOM_CHECK(o.layout == "nhwc" || o.layout == "nchw", ValueError,
             "[conv_layers] --layout must be nhwc or nchw, got '{}'", o.layout);
  return o;
}

std::vector<ConvLayer> model_convs(const std::string& name, int64_t batch) {
  const models::ZooModel& row = models::zoo_model(name);
  std::shared_ptr<nn::Module> net = row.build(row.num_classes);
  net->eval();  // batch 1 through batch norm's training statistics would be refused
  std::vector<ConvLayer> layers;
  std::map<std::string, size_t> index;
  trace::Recorder recorder(trace::Keep::Shapes);
  (*net)(randn(row.batch_shape(1)));
  for (const trace::Op& op : recorder.ops()) {
    if (op.name != "conv2d") continue;
    ConvLayer layer{.x = op.inputs[0].sizes(), .weight = op.inputs[1].sizes(), .bias = op.inputs[2].defined()};
    layer.x[0] = batch;
    const auto pair = [&op](const char* attribute) {
      const std::vector<int64_t>& v = op.get_ints(attribute);
      return Size2(v[0], v[1]);
    };
    layer.options = {.stride = pair("stride"), .padding = pair("padding"), .dilation = pair("dilation"),
                     .groups = op.get_int("groups")};
    const Conv2dOptions& c = layer.options;
    const std::string key = fmt::format("{} {} {} {} {} {} {} {} {} {}", shape_text(layer.x), shape_text(layer.weight),
                                        layer.bias, c.stride.h, c.stride.w, c.padding.h, c.padding.w, c.dilation.h,
                                        c.dilation.w, c.groups);
    auto [it, added] = index.emplace(key, layers.size());
    if (added) {
      layer.module = op.module;
      layers.push_back(layer);
    }
    ++layers[it->second].uses;
  }
  return layers;
}

LayerTimes time_layer(const ConvLayer& layer, const ConvLayersOptions& o) {
  const DType dtype = o.precision == "bf16" ? DType::BFloat16 : DType::Float32;
  const MemoryFormat format = o.layout == "nhwc" ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  const TensorOptions on{.dtype = dtype, .device = o.device};
  Generator gen(1);
  const Tensor x = randn(layer.x, on, &gen).contiguous(format);
  const Tensor w = randn(layer.weight, on, &gen).contiguous(format);
  const Tensor b = layer.bias ? randn({layer.weight[0]}, on, &gen) : Tensor();
  const Tensor dy = randn_like(conv2d(x, w, b, layer.options), &gen);
  Tensor y;
  const auto forward = [&] { y = conv2d(x, w, b, layer.options); };
  const auto with_gradients = backward_work(leaf(x, true), leaf(w, true), leaf(b, true), dy, layer.options);
  const auto dgrad = backward_work(leaf(x, true), w, b, dy, layer.options);
  const auto wgrad = backward_work(x, leaf(w, true), leaf(b, true), dy, layer.options);
  const auto settle = [&] {
    forward();
    with_gradients();
    if (o.split) {
      dgrad();
      wgrad();
    }
  };
  settle();
  if (!settle_plans(o.device, [&] {
        step_boundary();
        settle();
      })) {
    std::fprintf(stderr, "conv_layers: plans still landing after %d rounds; the times may include a swap\n",
                 kSettleRounds);
  }
  settle();  // an op whose plan was swapped in races its kernels again, before any capture
  LayerTimes times{.forward_ms = time_work(forward, o), .with_gradients_ms = time_work(with_gradients, o)};
  if (o.split) {
    times.dgrad_ms = time_work(dgrad, o);
    times.wgrad_ms = time_work(wgrad, o);
  }
  return times;
}

std::string to_json(const ConvLayer& layer, const LayerTimes& t, const ConvLayersOptions& o) {
  const Conv2dOptions& c = layer.options;
  return fmt::format(
      "{{\"framework\": \"loom\", \"kind\": \"conv\", \"model\": {}, \"module\": {}, \"precision\": {}, "
      "\"layout\": {}, \"device\": {}, \"x\": {}, \"weight\": {}, \"bias\": {}, \"stride\": [{}, {}], "
      "\"padding\": [{}, {}], \"dilation\": [{}, {}], \"groups\": {}, \"uses\": {}, \"replays\": {}, "
      "\"repeats\": {}, \"forward_ms\": {}, \"with_gradients_ms\": {}{}}}",
      json_string(o.model), json_string(layer.module), json_string(o.precision), json_string(o.layout),
      json_string(o.device.str()), shape_text(layer.x), shape_text(layer.weight), layer.bias ? "true" : "false",
      c.stride.h, c.stride.w, c.padding.h, c.padding.w, c.dilation.h, c.dilation.w, c.groups, layer.uses,
      o.replays, o.repeats, json_number(t.forward_ms), json_number(t.with_gradients_ms), split_fields(t));
}

void run_conv_layers(const ConvLayersOptions& o) {
  const std::vector<ConvLayer> layers = chosen_layers(o);
  DeviceGuard on_device(o.device);
  NumericsGuard numerics({.precision = o.precision == "strict" ? Precision::StrictFp32 : Precision::Tf32});
  std::ofstream json;
  if (!o.json.empty()) json.open(o.json, std::ios::app);
  LOOM_CHECK(o.json.empty() || json.is_open(), IoError, "[conv_layers] cannot open {} to append", o.json);
  double forward_total = 0, gradients_total = 0;
  fmt::print("{} batch {} {} {} on {}: ms per call (x uses = ms per step)\n", o.model, o.batch, o.precision,
             o.layout, o.device.str());
  for (const ConvLayer& layer : layers) {
    const LayerTimes t = time_layer(layer, o);
    forward_total += t.forward_ms * static_cast<double>(layer.uses);
    gradients_total += t.with_gradients_ms * static_cast<double>(layer.uses);
    fmt::print("  x {} w {} stride {} groups {} x{}: forward {:.4f}, with gradients {:.4f}{}  ({})\n",
               shape_text(layer.x), shape_text(layer.weight), layer.options.stride.h, layer.options.groups,
               layer.uses, t.forward_ms, t.with_gradients_ms, split_text(t), layer.module);
    if (json.is_open()) json << to_json(layer, t, o) << "\n" << std::flush;  // each line kept if a later layer fails
  }
  fmt::print("  per step: forward {:.4f} ms, with gradients {:.4f} ms\n", forward_total, gradients_total);
  if (o.plans) fmt::print("\n{}", plan_report());
}

}  // namespace loom::bench
