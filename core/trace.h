// File: core/trace.h
// Op tracing: while a trace::Recorder is alive on a thread, every public op
// that runs there (conv2d, add, reshape, ...) reports its name, its input and
// output tensors and the attributes that fix what it computes. The ONNX
// exporter (onnx/export.h) turns a traced forward into a graph; fusion by
// tracing can read the same records to find chains (conv2d -> batch_norm ->
// relu) whatever the module structure, through Op::module and the tensors'
// identity (TensorImpl*: an op's output is the next op's input).
//
//   trace::Recorder recorder;
//   Tensor y = net(x);                   // ops run as usual, and are recorded
//   for (const trace::Op& op : recorder.ops()) std::cout << op.str() << "\n";
//       // "conv2d(2 inputs) stride=[1, 1] ... in features.0"
//
// Only the outermost op is recorded: linear's matmul, a reshape's view or
// conv2d's autocast casts run inside it and are not, so the trace holds the
// ops the forward called. An op whose output is one of its inputs (dropout in
// evaluation, contiguous() of a contiguous tensor) records nothing. Tensors
// that no recorded op produced (parameters, buffers, the forward's inputs,
// constants made before or outside the ops) appear only as inputs.
//
// Fusion by tracing (core/ops/fusion_trace.h) replays a trace: while a
// Substituter is installed, each outermost op is numbered as the recorder
// numbered it (Op::index) and the ops that can fuse ask it, before computing,
// whether to return something else (OpScope::substitute).
//
// Off (no recorder, no substituter), an op pays one thread-local test on entry.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace loom::trace {

using Value = std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

struct Attribute {
  std::string name;
  Value value;
};

struct Op {
  std::string name;             // the public op: "conv2d", "add", "reshape", "relu"
  std::vector<Tensor> inputs;   // in argument order; an optional one not given is undefined
  std::vector<Tensor> outputs;
  std::vector<Attribute> attributes;
  std::string module;           // dotted path of the module whose forward ran it ("layer1.0.conv1")
  int64_t index = 0;            // the op's ordinal among the outermost ops since the recorder began
  bool in_fused_block = false;  // ran inside a fusion::Block (FusedRegion): already fused

  bool has(std::string_view attribute) const;
  // The attribute's value; ValueError naming the op and the attribute when it
  // is missing or of another type (an integer reads as a double too).
  int64_t get_int(std::string_view attribute) const;
  double get_double(std::string_view attribute) const;
  const std::string& get_string(std::string_view attribute) const;
  const std::vector<int64_t>& get_ints(std::string_view attribute) const;
  const std::vector<double>& get_doubles(std::string_view attribute) const;
  // "conv2d (1,3,8,8) (4,3,3,3) -> (1,4,8,8) stride=[1, 1] padding=[1, 1] in features.0"
  std::string str() const;

 private:
  const Value& value(std::string_view attribute) const;
};

// A tensor with t's sizes, strides, dtype and device but no memory: what a
// Recorder keeps of an op's output under Keep::Shapes, and fusion by tracing's
// placeholder for a chain's inner values.
Tensor stand_in(const Shape& sizes, const Shape& strides, DType dtype, Device device);

// What a Recorder keeps of the tensors the ops pass. Values: the tensors
// themselves, so that an exporter reads weights and constants. Shapes: each
// tensor an op made is kept as its stand_in, so the forward's intermediates are
// freed when the forward drops them, as without a recorder (a trained model's
// graph holds every one of them otherwise: half again the saved tensors of a
// ResNet); inputs no recorded op made (parameters, the batch) stay as they are.
// Either way one tensor is one object in every op that uses it.
enum class Keep : uint8_t { Values, Shapes };

// Records the ops of this thread while alive. One at a time per thread: a
// second one throws ValueError.
class Recorder {
 public:
  explicit Recorder(Keep keep = Keep::Values);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  const std::vector<Op>& ops() const { return ops_; }
  void add(Op op);
  // t as the ops were recorded with it: its stand-in when a recorded op made it
  // (Keep::Shapes), else t itself; e.g. the forward's returned tensors.
  Tensor recorded(const Tensor& t) const;

 private:
  struct StandIn {
    std::weak_ptr<TensorImpl> made;  // the op's output, while it lives (its address is the key)
    Tensor stand_in;
  };
  Keep keep_;
  std::vector<Op> ops_;
  std::unordered_map<const TensorImpl*, StandIn> stand_ins_;
};

// Takes the place of ops during a replay of a traced forward. substitute() is
// asked by each op that can fuse, before it computes: `index` is the op's
// ordinal (as Op::index numbered the traced run), the rest as Op's. A result
// replaces the op's output; nullopt lets the op run.
class Substituter {
 public:
  virtual ~Substituter() = default;
  virtual std::optional<Tensor> substitute(int64_t index, const char* name, const std::vector<Tensor>& inputs,
                                           const std::vector<Attribute>& attributes) = 0;
};

// Installs a substituter on this thread while alive, numbering the outermost
// ops from 0. One at a time per thread, and not while a Recorder records
// (ValueError): a trace is of the ops as written.
class SubstituteScope {
 public:
  explicit SubstituteScope(Substituter& substituter);
  ~SubstituteScope();
  SubstituteScope(const SubstituteScope&) = delete;
  SubstituteScope& operator=(const SubstituteScope&) = delete;
};

// True while a Recorder or a Substituter is alive on this thread.
bool active();

// Opened first thing in every public op. record() keeps the op only when it is
// the outermost op running under a recorder (recording() says so, so that an
// op builds its attribute list only then).
class OpScope {
 public:
  explicit OpScope(const char* name) : name_(name) {
    if (active()) enter();
  }
  ~OpScope() {
    if (entered_) leave();
  }
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  bool recording() const { return outermost_ && recorder_attached(); }
  // Whether substitute() may be asked: the outermost op under a substituter,
  // outside any FusedRegion.
  bool substituting() const;
  // The substituter's answer for this op (see Substituter); call only when substituting().
  std::optional<Tensor> substitute(const std::vector<Tensor>& inputs, const std::vector<Attribute>& attributes);
  void record(std::vector<Tensor> inputs, std::vector<Tensor> outputs, std::vector<Attribute> attributes = {});
  void record(std::vector<Tensor> inputs, const Tensor& output, std::vector<Attribute> attributes = {}) {
    record(std::move(inputs), std::vector<Tensor>{output}, std::move(attributes));
  }

 private:
  void enter();
  void leave();
  static bool recorder_attached();

  const char* name_;
  bool entered_ = false;
  bool outermost_ = false;
  int64_t index_ = 0;
};

// Opened by fusion::Block around the ops it runs: they are recorded as usual
// (the ONNX exporter reads them) but marked Op::in_fused_block, and never
// substituted, since they are fused already.
class FusedRegion {
 public:
  FusedRegion();
  ~FusedRegion();
  FusedRegion(const FusedRegion&) = delete;
  FusedRegion& operator=(const FusedRegion&) = delete;
};

// The module whose forward is running, for Op::module: nn::Module opens one per
// call while a recorder is alive.
class ModuleScope {
 public:
  explicit ModuleScope(std::string path);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  std::string outer_;
};

}  // namespace loom::trace
