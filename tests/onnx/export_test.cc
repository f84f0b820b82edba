// File: tests/onnx/export_test.cc
// ONNX export: every registry model passes the ONNX checker (Debian's
// python3-onnx, full check with strict shape inference) through the export
// tool and tools/onnx_check.py; the batch is symbolic or fixed as asked; batch
// norm folds; group and instance norm pass the checker; comparisons, masks,
// integer arithmetic, rounding, Python's division, sin and cos, scatters and
// the value-sized ops (nonzero, masked_select, bincount) give Loom's values
// (their nodes evaluated with numpy); and what has no ONNX form is refused
// with the op and module named.
// The two ImageNet VGGs (0.5 GB of weights each) are left to tools/onnx_zoo.sh
// --max-mb runs (docs/onnx.md): VGG-11/16 on CIFAR cover the same layers here.
//
// N batch.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/ops/ops.h"
#include "core/serialize.h"
#include "layers/nn.h"
#include "models/registry.h"
#include "onnx/export.h"
#include "onnx/zoo.h"
#include "tests/testing.h"

using namespace loom;

namespace {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    path = std::filesystem::temp_directory_path() / ("loom_onnx_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

// stdout and stderr of a shell command, and its exit status.
std::pair<std::string, int> run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  const int status = ::pclose(pipe);
  return {out, status};
}

// Python with Debian's onnx: what an exported file says about itself.
std::string describe(const std::string& path) {
  auto [out, status] = run("/usr/bin/python3 -c \"import onnx,sys; m=onnx.load(sys.argv[1]); "
                           "d=lambda v:[x.dim_param or x.dim_value for x in v.type.tensor_type.shape.dim]; "
                           "print([n.op_type for n in m.graph.node].count('BatchNormalization'), "
                           "[(v.name, d(v)) for v in list(m.graph.input)+list(m.graph.output)])\" " + path);
  CHECK_MESSAGE(status == 0, out);
  return out;
}

// f(x): a forward written inline.
class Fn : public nn::Module {
 public:
  explicit Fn(std::function<Tensor(const Tensor&)> f) : f_(std::move(f)) {}
  Tensor forward(const Tensor& x) override { return f_(x); }

 private:
  std::function<Tensor(const Tensor&)> f_;
};

// f(fc(x)), fc a Linear(4, 4): ops inside a module of its own.
class Custom : public nn::Module {
 public:
  explicit Custom(std::function<Tensor(const Tensor&)> f) : f_(std::move(f)) {
    fc_ = register_module("fc", nn::Linear(4, 4));
  }
  Tensor forward(const Tensor& x) override { return f_((*fc_)(x)); }

 private:
  std::function<Tensor(const Tensor&)> f_;
  std::shared_ptr<nn::Linear> fc_;
};

}  // namespace

TEST_CASE("every registry model exports and passes the ONNX checker") {
  TempDir dir;
  std::string names;
  int count = 0;
  for (const models::ZooModel& row : models::zoo()) {
    if (row.name == "vgg11_bn" || row.name == "vgg16_bn") continue;
    names += (names.empty() ? "" : ",") + row.name;
    ++count;
  }
  // ImageNet models at 64x64 (their pools are adaptive): the same layers as at 224, a twelfth of the work.
  auto [out, status] = run("examples/onnx/export --zoo " + dir.path.string() + " --max-image-size 64 --models " + names);
  REQUIRE_MESSAGE(status == 0, out);
  auto [checked, check_status] = run("/usr/bin/python3 tools/onnx_check.py " + dir.path.string());
  MESSAGE(checked);
  CHECK(check_status == 0);
  CHECK(checked.find(std::to_string(count) + " passed, 0 failed") != std::string::npos);
}

TEST_CASE("the batch is symbolic, or fixed as asked, and follows reshapes and expands (ViT)") {
  TempDir dir;
  const std::string dynamic = (dir.path / "vit.onnx").string(), fixed = (dir.path / "vit_fixed.onnx").string();
  onnx::ZooExport e = onnx::export_zoo_model("vit_tiny", {}, dynamic, {.batch = 3});
  CHECK(e.summary.input_names == std::vector<std::string>{"input"});
  CHECK(describe(dynamic).find("('input', ['batch', 1, 28, 28]), ('output', ['batch', 10])") != std::string::npos);
  onnx::export_zoo_model("vit_tiny", {}, fixed, {.batch = 3, .onnx = {.dynamic_batch = false}});
  CHECK(describe(fixed).find("('input', [3, 1, 28, 28]), ('output', [3, 10])") != std::string::npos);
}

TEST_CASE("batch norm is BatchNormalization, or folded into the conv before it") {
  TempDir dir;
  const std::string plain = (dir.path / "a.onnx").string(), folded = (dir.path / "b.onnx").string();
  onnx::export_zoo_model("mnist_net", {}, plain, {.onnx = {.input_names = {"image"}, .output_names = {"logits"}}});
  onnx::export_zoo_model("mnist_net", {}, folded, {.onnx = {.fold_batch_norm = true}});
  CHECK(describe(plain).find("2 [('image'") == 0);
  CHECK(describe(folded).find("0 [('input'") == 0);
}

TEST_CASE("group and instance norm export as InstanceNormalization (opset 17) and pass the checker") {
  TempDir dir;
  const std::string path = (dir.path / "norms.onnx").string();
  nn::Sequential net(nn::GroupNorm(3, 6), nn::InstanceNorm2d(6, {.affine = true}),
                     nn::InstanceNorm2d(6, {.track_running_stats = true}));
  net.eval();
  onnx::export_model(net, {randn({2, 6, 5, 4})}, path);
  auto [out, status] = run("/usr/bin/python3 -c \"import onnx,sys; m=onnx.load(sys.argv[1]); "
                           "onnx.checker.check_model(m, full_check=True); "
                           "print([n.op_type for n in m.graph.node if 'Norm' in n.op_type])\" " + path);
  CHECK_MESSAGE(status == 0, out);
  CHECK_MESSAGE(out.find("['InstanceNormalization', 'InstanceNormalization', 'BatchNormalization']") !=
                    std::string::npos,
                out);
}

// The masks' ONNX nodes evaluated with numpy, node by node (Debian's onnx has no
// reference evaluator), against Loom's output on the same input: argv 1 the
// file, 2 and 3 the input's and Loom's output's values, 4 a relative tolerance
// (0: the same values exactly), 5 and 6 their shapes. Prints the op types. Mod follows its fmod
// attribute, Div of integers truncates, as ONNX's do, TopK orders stably, Clip's
// bounds are optional and ScatterElements adds in the index's row-major order;
// Conv, MaxPool and AveragePool are 2-D, the pools without ceil_mode and
// AveragePool without pads; RNN, LSTM and GRU run one direction, without
// sequence_lens, clip or peepholes, and GRU only with linear_before_reset;
// ReduceMax and ReduceMean take their axes as an attribute (opset 17's ReduceMean; Loom's ReduceMax).
constexpr const char* kEvaluateMasks = R"(
import json, math, sys
import numpy as np
import onnx
from onnx import numpy_helper as h
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
x = np.array(json.loads(sys.argv[2]), dtype=np.float32).reshape(json.loads(sys.argv[5]))
want = np.array(json.loads(sys.argv[3]), dtype=np.float32).reshape(json.loads(sys.argv[6]))
env = {m.graph.input[0].name: x, **{i.name: h.to_array(i) for i in m.graph.initializer}}
types = {1: np.float32, 2: np.uint8, 7: np.int64, 9: np.bool_, 11: np.float64}
ops = {'Equal': np.equal, 'Less': np.less, 'LessOrEqual': np.less_equal, 'Greater': np.greater,
       'GreaterOrEqual': np.greater_equal, 'And': np.logical_and, 'Or': np.logical_or, 'Xor': np.logical_xor,
       'Not': np.logical_not, 'Where': np.where, 'Max': np.maximum, 'Min': np.minimum, 'Mul': np.multiply,
       'Add': np.add, 'Sub': np.subtract, 'Div': np.divide, 'Abs': np.abs, 'IsInf': np.isinf, 'IsNaN': np.isnan,
       'Neg': np.negative, 'Pow': np.power, 'Identity': lambda a: a, 'Floor': np.floor, 'Ceil': np.ceil,
       'Round': np.round, 'Sin': np.sin, 'Cos': np.cos, 'Exp': np.exp, 'Log': np.log, 'Tan': np.tan,
       'Atan': np.arctan, 'Erf': lambda a: np.vectorize(math.erf, otypes=[a.dtype])(a), 'Sqrt': np.sqrt,
       'Reciprocal': np.reciprocal, 'Sign': np.sign, 'Relu': lambda a: np.maximum(a, 0).astype(a.dtype),
       'Tanh': np.tanh, 'MatMul': np.matmul}
sigmoid = lambda v: 1 / (1 + np.exp(-v))
ops['Sigmoid'] = sigmoid
def recurrent(n, a):  # RNN, LSTM and GRU, one direction, as ONNX's operator docs state them
    x, w, r = env[n.input[0]], env[n.input[1]][0], env[n.input[2]][0]
    given = lambda k: env[n.input[k]][0] if len(n.input) > k and n.input[k] else None
    hidden, steps, batch = a['hidden_size'].i, x.shape[0], x.shape[1]
    gates = w.shape[0] // hidden
    b = given(3) if given(3) is not None else np.zeros(2 * gates * hidden, x.dtype)
    h = given(5) if given(5) is not None else np.zeros((batch, hidden), x.dtype)
    c = given(6) if given(6) is not None else np.zeros((batch, hidden), x.dtype)
    named = a['activations'].strings[0] if 'activations' in a else b'Tanh'
    act = {b'Tanh': np.tanh, b'Relu': lambda v: np.maximum(v, 0)}[named]
    y = np.zeros((steps, 1, batch, hidden), x.dtype)
    reverse = 'direction' in a and a['direction'].s == b'reverse'
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        xw, hr = x[t] @ w.T + b[:gates * hidden], h @ r.T + b[gates * hidden:]
        if n.op_type == 'RNN':
            h = act(xw + hr)
        elif n.op_type == 'LSTM':
            i, o, f, g = np.split(xw + hr, 4, axis=1)
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
            h = sigmoid(o) * np.tanh(c)
        else:
            assert a['linear_before_reset'].i == 1
            (zx, rx, nx), (zh, rh, nh) = np.split(xw, 3, axis=1), np.split(hr, 3, axis=1)
            z, reset = sigmoid(zx + zh), sigmoid(rx + rh)
            h = (1 - z) * np.tanh(nx + reset * nh) + z * h
        y[t, 0] = h
    for name, value in zip(n.output, (y, h[None], c[None])):
        env[name] = value
def truncating_div(p, d):
    q = p // d
    return q + ((q * d != p) & ((p < 0) != (d < 0))).astype(p.dtype)
for n in m.graph.node:
    a = {attribute.name: attribute for attribute in n.attribute}
    if n.op_type == 'Constant':
        env[n.output[0]] = h.to_array(a['value'].t)
    elif n.op_type == 'Cast':
        env[n.output[0]] = env[n.input[0]].astype(types[a['to'].i])
    elif n.op_type == 'Concat':
        env[n.output[0]] = np.concatenate([env[i] for i in n.input], axis=a['axis'].i)
    elif n.op_type == 'Mod':
        env[n.output[0]] = (np.fmod if a['fmod'].i == 1 else np.mod)(env[n.input[0]], env[n.input[1]])
    elif n.op_type == 'Clip':
        v, (lo, hi) = env[n.input[0]], [env[i] if i else None for i in (list(n.input[1:]) + ['', ''])[:2]]
        env[n.output[0]] = v if lo is None and hi is None else np.clip(v, lo, hi)
    elif n.op_type == 'TopK':
        v, k, axis = env[n.input[0]], int(env[n.input[1]][0]), a['axis'].i
        order = np.argsort(-v if a['largest'].i else v, axis=axis, kind='stable')
        order = np.take(order, np.arange(k), axis=axis)
        env[n.output[0]], env[n.output[1]] = np.take_along_axis(v, order, axis=axis), order.astype(np.int64)
    elif n.op_type == 'Shape':
        v = env[n.input[0]]
        start, end = a['start'].i if 'start' in a else 0, a['end'].i if 'end' in a else v.ndim
        env[n.output[0]] = np.array(v.shape[start:end], dtype=np.int64)
    elif n.op_type == 'CumSum':
        v = env[n.input[0]]
        env[n.output[0]] = np.cumsum(v, axis=int(env[n.input[1]]), dtype=v.dtype)
    elif n.op_type == 'ReduceSum':
        axes = tuple(int(i) for i in env[n.input[1]]) if len(n.input) > 1 and n.input[1] else None
        keep = bool(a['keepdims'].i) if 'keepdims' in a else True
        v = env[n.input[0]]
        env[n.output[0]] = np.sum(v, axis=axes, keepdims=keep, dtype=v.dtype)
    elif n.op_type == 'ReduceProd':
        axes = tuple(a['axes'].ints) if 'axes' in a and len(a['axes'].ints) else None
        keep = bool(a['keepdims'].i) if 'keepdims' in a else True
        v = env[n.input[0]]
        env[n.output[0]] = np.prod(v, axis=axes, keepdims=keep, dtype=v.dtype)
    elif n.op_type == 'Slice':
        v, where = env[n.input[0]], [slice(None)] * env[n.input[0]].ndim
        for start, end, axis in zip(*[env[i] for i in n.input[1:4]]):
            where[int(axis)] = slice(int(start), int(end))
        env[n.output[0]] = v[tuple(where)]
    elif n.op_type == 'Squeeze':
        env[n.output[0]] = np.squeeze(env[n.input[0]], axis=tuple(int(i) for i in env[n.input[1]]))
    elif n.op_type == 'Unsqueeze':
        env[n.output[0]] = np.expand_dims(env[n.input[0]], axis=tuple(int(i) for i in env[n.input[1]]))
    elif n.op_type == 'Reshape':
        env[n.output[0]] = env[n.input[0]].reshape(env[n.input[1]])
    elif n.op_type in ('ReduceMax', 'ReduceMean'):
        axes = tuple(a['axes'].ints) if 'axes' in a and len(a['axes'].ints) else None
        reduce = np.max if n.op_type == 'ReduceMax' else np.mean
        keep = bool(a['keepdims'].i) if 'keepdims' in a else True
        env[n.output[0]] = reduce(env[n.input[0]], axis=axes, keepdims=keep)
    elif n.op_type == 'IsInf':
        v, flag = env[n.input[0]], lambda name: bool(a[name].i) if name in a else True
        env[n.output[0]] = (np.isposinf(v) & flag('detect_positive')) | (np.isneginf(v) & flag('detect_negative'))
    elif n.op_type == 'Softmax':
        v, axis = env[n.input[0]], a['axis'].i if 'axis' in a else -1
        e = np.exp(v - np.max(v, axis=axis, keepdims=True))
        env[n.output[0]] = (e / np.sum(e, axis=axis, keepdims=True)).astype(v.dtype)
    elif n.op_type == 'LayerNormalization':
        v, axes = env[n.input[0]], tuple(range(a['axis'].i, 0))
        centred = v - v.mean(axis=axes, keepdims=True)
        normed = centred / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + a['epsilon'].f)
        env[n.output[0]] = (normed * env[n.input[1]] + (env[n.input[2]] if len(n.input) > 2 else 0)).astype(v.dtype)
    elif n.op_type == 'Expand':
        v = env[n.input[0]]
        env[n.output[0]] = np.broadcast_to(v, np.broadcast_shapes(v.shape, tuple(env[n.input[1]]))).copy()
    elif n.op_type == 'Gather':
        env[n.output[0]] = np.take(env[n.input[0]], env[n.input[1]], axis=a['axis'].i if 'axis' in a else 0)
    elif n.op_type == 'Pad':
        v, pads = env[n.input[0]], [int(p) for p in env[n.input[1]]]
        has = lambda k: len(n.input) > k and n.input[k]
        axes = [int(i) % v.ndim for i in env[n.input[3]]] if has(3) else list(range(v.ndim))
        width = [(0, 0)] * v.ndim
        for k, axis in enumerate(axes):
            width[axis] = (pads[k], pads[k + len(axes)])
        v = v[tuple(slice(max(-b, 0), v.shape[i] - max(-e, 0)) for i, (b, e) in enumerate(width))]
        mode = a['mode'].s.decode() if 'mode' in a else 'constant'
        value = {'constant_values': env[n.input[2]].item() if has(2) else 0} if mode == 'constant' else {}
        env[n.output[0]] = np.pad(v, [(max(b, 0), max(e, 0)) for b, e in width], mode=mode, **value)
    elif n.op_type in ('Conv', 'MaxPool', 'AveragePool'):
        v, (sh, sw), p = env[n.input[0]], a['strides'].ints, a['pads'].ints
        fill = -np.inf if n.op_type == 'MaxPool' else 0
        v = np.pad(v, [(0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])], constant_values=fill)
        w = env[n.input[1]] if n.op_type == 'Conv' else None
        kh, kw = a['kernel_shape'].ints
        (dh, dw), g = (a['dilations'].ints, a['group'].i) if w is not None else ((1, 1), 1)
        oh, ow = (v.shape[2] - dh * (kh - 1) - 1) // sh + 1, (v.shape[3] - dw * (kw - 1) - 1) // sw + 1
        taps = [((r, s), v[:, :, r * dh:r * dh + sh * (oh - 1) + 1:sh, s * dw:s * dw + sw * (ow - 1) + 1:sw])
                for r in range(kh) for s in range(kw)]
        if w is None:
            assert a['ceil_mode'].i == 0 and (n.op_type == 'MaxPool' or not any(p))
            stacked = np.stack([t for _, t in taps])
            env[n.output[0]] = stacked.max(0) if n.op_type == 'MaxPool' else stacked.mean(0, dtype=v.dtype)
        else:
            cg, kg, y = w.shape[1], w.shape[0] // g, np.zeros((v.shape[0], w.shape[0], oh, ow), v.dtype)
            for k in range(w.shape[0]):
                for (r, s), t in taps:
                    y[:, k] += np.einsum('nchw,c->nhw', t[:, k // kg * cg:(k // kg + 1) * cg], w[k, :, r, s])
            env[n.output[0]] = y + (env[n.input[2]].reshape(1, -1, 1, 1) if len(n.input) > 2 else 0)
    elif n.op_type in ('RNN', 'LSTM', 'GRU'):
        recurrent(n, a)
    elif n.op_type == 'Transpose':
        env[n.output[0]] = np.transpose(env[n.input[0]], tuple(a['perm'].ints))
    elif n.op_type == 'NonZero':
        env[n.output[0]] = np.array(np.nonzero(env[n.input[0]]), dtype=np.int64)
    elif n.op_type == 'Compress':
        env[n.output[0]] = np.compress(env[n.input[1]], env[n.input[0]].reshape(-1))
    elif n.op_type == 'ScatterElements':
        data, index, updates = [env[i] for i in n.input]
        v, axis, adds = data.copy(), a['axis'].i, a['reduction'].s == b'add'
        for where in np.ndindex(index.shape):
            target = list(where)
            target[axis] = index[where]
            v[tuple(target)] = v[tuple(target)] + updates[where] if adds else updates[where]
        env[n.output[0]] = v
    elif n.op_type == 'Div' and env[n.input[0]].dtype.kind in 'iu':
        env[n.output[0]] = truncating_div(env[n.input[0]], env[n.input[1]])
    else:
        env[n.output[0]] = ops[n.op_type](*[env[i] for i in n.input])
got = env[m.graph.output[0].name]
print(sorted({n.op_type for n in m.graph.node}), got.tolist())
rtol = float(sys.argv[4])
same = np.array_equal(got, want) if rtol == 0 else np.allclose(got, want, rtol=rtol, atol=rtol)
sys.exit(0 if got.dtype == np.float32 and same else 1)
)";

// Exports `masks` with the example x, evaluates its nodes with numpy on `run_on`
// (x when undefined: another batch size checks the dynamic batch) and requires
// Loom's output there (exactly, or within rtol); returns the evaluator's
// printout (the op types, the values).
// With LOOM_ONNX_KEEP=DIR set, each export is also kept as DIR/masks_<k>.onnx
// with its input and Loom's output as safetensors, the files tools/onnx_check.py
// runs through ONNX Runtime (on a host that has it).
std::string check_masks_export(nn::Module& masks, const Tensor& x, double rtol = 0, const Tensor& run_on = Tensor()) {
  TempDir dir;
  const std::string path = (dir.path / "masks.onnx").string(), script = (dir.path / "masks.py").string();
  const onnx::ExportSummary summary = onnx::export_model(masks, {x}, path);
  const Tensor input = run_on.defined() ? run_on : x;
  const Tensor expected = masks(input);
  if (const char* keep = std::getenv("LOOM_ONNX_KEEP")) {
    static int kept = 0;
    const std::filesystem::path base = std::filesystem::path(keep) / fmt::format("masks_{}", kept++);
    std::filesystem::create_directories(keep);
    std::filesystem::copy_file(path, base.string() + ".onnx", std::filesystem::copy_options::overwrite_existing);
    save_safetensors(base.string() + ".inputs.safetensors", {{summary.input_names.at(0), input}});
    save_safetensors(base.string() + ".outputs.safetensors", {{summary.output_names.at(0), expected}});
  }
  {
    FILE* f = std::fopen(script.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs(kEvaluateMasks, f);
    std::fclose(f);
  }
  const auto json = [](const Tensor& t) { return fmt::format("[{}]", fmt::join(testing::values(t), ",")); };
  const auto shape = [](const Tensor& t) { return fmt::format("[{}]", fmt::join(t.sizes(), ",")); };
  auto [out, status] = run("/usr/bin/python3 " + script + " " + path + " '" + json(input) + "' '" + json(expected) +
                           "' " + std::to_string(rtol) + " '" + shape(input) + "' '" + shape(expected) + "'");
  CHECK_MESSAGE(status == 0, out);
  return out;
}

TEST_CASE("comparisons, logical ops, where, masked_fill, maximum and minimum export and compute Loom's values") {
  Fn masks([](const Tensor& y) {
    const Tensor keep = logical_or((y > 0.1) & ~(y == 0.3), y <= -1.0);
    const Tensor z = masked_fill(y, y < -0.5, -2.0);
    const Tensor picked = where(logical_xor(keep, ne(z, y)), maximum(z, y * 0.5), minimum(z, y * 0.25));
    const Tensor flags = logical_and(ge(y, z), logical_not(y)) | (eq(z, y) & lt(y * 0.5, z)) | le(z, y * 2.0);
    return picked + (y >= 2.0).to(DType::Float32) + flags.to(DType::Float32) * 10.0;
  });
  const std::string out = check_masks_export(masks, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}));
  for (const char* node : {"'And'", "'Equal'", "'Greater'", "'GreaterOrEqual'", "'Less'", "'LessOrEqual'", "'Max'",
                           "'Min'", "'Not'", "'Or'", "'Where'", "'Xor'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("prelu, the pixel shuffles and the 2-D pad modules export and compute Loom's values") {
  const Tensor slope = tensor({0.25}, {1}), slopes = tensor({0.5, -0.25, 2.0, 0.0}, {4});
  Fn rearranged([&](const Tensor& y) {
    Tensor x = prelu(pixel_shuffle(y.reshape({-1, 4, 1, 1}), 2), slope);  // (N, 1, 2, 2)
    x = pixel_unshuffle(nn::ReflectionPad2d(1)(x), 2);                     // (N, 4, 2, 2)
    x = nn::ConstantPad2d({1, 0, 0, 1}, 1.5)(nn::ReplicationPad2d({0, 1, 1, 0})(prelu(x, slopes)));
    return nn::ZeroPad2d({1, 1, -1, 0})(x).flatten(1);
  });
  const std::string out = check_masks_export(rearranged, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}));
  for (const char* node : {"'Pad'", "'Transpose'", "'Where'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("Conv1d and the 1-D poolings export as Conv, MaxPool and AveragePool over Unsqueeze and compute Loom's "
          "values") {
  Generator gen(3);
  nn::Conv1d conv(2, 4, 3, {.padding = 2, .dilation = 2, .groups = 2, .generator = &gen});
  nn::MaxPool1d pool(2);
  nn::AdaptiveAvgPool1d cells(2);
  Fn signal([&](const Tensor& y) { return cells(pool(relu(conv(y.reshape({-1, 2, 4}))))).flatten(1); });
  const Tensor x = tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0, 1.0, -2.0, 0.5, 0.75, -0.25, 1.5, 3.0, -3.0},
                          {2, 8});
  const std::string out = check_masks_export(signal, x, 1e-5);
  for (const char* node : {"'AveragePool'", "'Conv'", "'MaxPool'", "'Unsqueeze'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("arithmetic that promotes an integer or Bool operand exports its Casts and computes Loom's values") {
  Fn promoted([](const Tensor& y) {
    const Tensor positive = (y > 0.0).to(DType::Int64), ones = (y > -10.0).to(DType::Int64);
    // float32 + int64, int64 * a non-integral number, int64 / int64 (true division), Bool * float32
    return (y + positive) + positive * 0.5 + positive / ones + (y > 0.2) * y;
  });
  const std::string out = check_masks_export(promoted, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}));
  CHECK_MESSAGE(out.find("'Cast'") != std::string::npos, out);
  CHECK_MESSAGE(out.find("'Div'") != std::string::npos, out);
}

TEST_CASE("cat exports as Concat without the 1-D empty tensors it skipped, and computes Loom's values") {
  Fn grown([](const Tensor& y) { return cat({empty({0}), y, empty({0}, {.dtype = DType::Int64}), y * 2.0}, 1); });
  const std::string out = check_masks_export(grown, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}));
  CHECK_MESSAGE(out.find("'Concat'") != std::string::npos, out);
}

TEST_CASE("sort, argsort, topk and cumsum export as TopK and CumSum and compute Loom's values") {
  Fn ordered([](const Tensor& y) {
    const Tensor up = sort(y, 1).values, down = sort(y, 0, true).values, low = topk(y, 4, 1, false).values;
    const Tensor positions = argsort(y, 1, true).to(DType::Float32) + topk(y, 1, 0).indices.to(DType::Float32);
    return up + down * 10.0 + low * 100.0 + positions + cumsum(y, 1) + cumsum(y > 0.0, 0).to(DType::Float32);
  });
  const std::string out = check_masks_export(ordered, tensor({0.3, -1.5, 2.0, 0.1, -0.5, 0.25, -1.0, 0.7}, {2, 4}));
  for (const char* node : {"'TopK'", "'CumSum'", "'Shape'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("prod, kthvalue and median export as ReduceProd and TopK and compute Loom's values") {
  Fn ranked([](const Tensor& y) {
    const Tensor shifted = y + 2.0;  // no zero factor
    const Tensor products = prod(shifted, 1, true) + prod(shifted * 0.5) + prod(y > -1.2, 1, true).to(DType::Float32);
    const Tensor kth = kthvalue(y, 3, 1, true).values + kthvalue(y, 1, 0).values;  // (2, 1) and (4)
    const ValuesIndices middle = median(y, 1, true);                               // the 2nd of 4
    const Tensor medians = middle.values + middle.indices.to(DType::Float32) * 10.0 + median(y, 0).values + median(y);
    return products + kth * 100.0 + medians * 1000.0;
  });
  const std::string out =
      check_masks_export(ranked, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}), 1e-6);
  for (const char* node : {"'ReduceProd'", "'TopK'", "'Slice'", "'Squeeze'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
  // Exported at batch 2, run at batch 3: median(y, 0) takes the 2nd of 3, not the 1st of 2.
  check_masks_export(ranked, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}), 1e-6,
                     tensor({0.3, -1.5, 2.0, 0.1, -0.5, 0.25, -1.0, 0.7, 1.25, -0.75, 0.5, -2.0}, {3, 4}));
  TempDir dir;
  Fn running([](const Tensor& y) { return cumprod(y, 1); });
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(running, {zeros({2, 4})}, (dir.path / "c.onnx").string()),
                             onnx::ExportError, "ONNX has no running product");
  Fn skipping([](const Tensor& y) { return nanmedian(y, 1).values; });
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(skipping, {zeros({2, 4})}, (dir.path / "n.onnx").string()),
                             onnx::ExportError, "NaN cannot be skipped");
}

TEST_CASE("isnan, isfinite, nan_to_num, any, all and a mask's count export and compute Loom's values") {
  Fn checks([](const Tensor& y) {
    const Tensor odd = where(y > 1.0, y * std::numeric_limits<double>::infinity(), y);  // 2.0 becomes inf
    const Tensor flags = isnan(odd).to(DType::Float32) + isfinite(odd).to(DType::Float32) * 10.0;
    const Tensor counts = any(y > 0.2, 1, true).to(DType::Float32) + all(y, 0).to(DType::Float32) * 10.0 +
                          (y > 0.0).sum().to(DType::Float32) * 100.0 + count_nonzero(y, {1}).to(DType::Float32)
                              .unsqueeze(1) * 1000.0;
    return nan_to_num(odd, 0.0, 5.0) + flags * 10.0 + counts * 100.0;
  });
  const std::string out = check_masks_export(checks, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}));
  for (const char* node : {"'ReduceSum'", "'Where'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("integer arithmetic exports in its integer dtype and computes Loom's values") {
  Fn counted([](const Tensor& y) {
    const Tensor positive = (y > 0.0).to(DType::Int64), mask = y > 0.2;
    // int64 with whole numbers and int64, -int64, abs, an integer power, a mask times a number, mask + mask
    const Tensor n = (positive * 3.0 + 1.0) * positive - abs(-positive) + pow(positive + 1.0, 2.0) + mask * 4.0;
    return (n + (mask + mask)).to(DType::Float32) + y;
  });
  const std::string out = check_masks_export(counted, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}));
  for (const char* node : {"'Abs'", "'Neg'", "'Pow'", "'Or'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("floor, ceil, round (half to even) and trunc export and compute Loom's values") {
  Fn rounded([](const Tensor& y) {
    // y * 5 holds -7.5, -2.5, 0.5 and 1.5: half-way values, rounded to even; trunc of y * -3 holds -0.
    const Tensor counts = (y * 10.0).to(DType::Int64);
    return floor(y * 3.0) + ceil(y * 3.0) * 10.0 + round(y * 5.0) * 100.0 + trunc(y * -3.0) * 1000.0 +
           (floor(counts) + round(counts)).to(DType::Float32) * 10000.0;
  });
  const Tensor x = tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4});
  const std::string out = check_masks_export(rounded, x);
  for (const char* node : {"'Floor'", "'Ceil'", "'Round'", "'Where'", "'Identity'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("log1p, expm1, log2, log10, tan, atan, erf, rsqrt and sign export and compute Loom's values") {
  Fn math([](const Tensor& y) {
    const Tensor positive = y * y + 0.5, counts = (y * 10.0).to(DType::Int64);
    return log1p(positive) + expm1(y) * 10.0 + log2(positive) * 100.0 + log10(positive) * 1000.0 + tan(y * 0.5) +
           atan(y) * 10.0 + erf(y) * 100.0 + rsqrt(positive) * 1000.0 + sign(y - 0.1) * 10000.0 +
           sign(counts).to(DType::Float32) * 100000.0;
  });
  const std::string out =
      check_masks_export(math, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}), 1e-6);
  for (const char* node : {"'Tan'", "'Atan'", "'Erf'", "'Reciprocal'", "'Sign'", "'Log'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("floor_divide and remainder export with Python's signs and compute Loom's values") {
  const Tensor x = tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4});
  Fn floats([](const Tensor& y) {
    // 1 // 0.1 is 9 (Floor(Div) would give 10: float32's 1 / 0.1 rounds to 10) and 1 % 0.1 is 0.099999994.
    const Tensor ones = y * 0.0 + 1.0, divisor = masked_fill(y, y == 0.0, 0.7);
    return floor_divide(ones, divisor) + remainder(ones, divisor) * 10.0 + remainder(y * 10.0, -4.0) * 100.0 +
           floor_divide(y * 10.0, 3.0) * 1000.0 + (y * 7.0) % divisor * 10000.0;
  });
  CHECK(testing::values(floor_divide(x * 0.0 + 1.0, x.slice(1, 0, 1) * 0.0 + 0.1)) ==
        std::vector<double>{9, 9, 9, 9, 9, 9, 9, 9});
  std::string out = check_masks_export(floats, x);
  for (const char* node : {"'Mod'", "'Floor'", "'Xor'", "'Where'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
  Fn integers([](const Tensor& y) {
    // n = -15, -10, -5, 0, 1, 2, 3, 20; d odd, so never 0: -9, -5, -1, 3, 3, 5, 5, 19; pixels uint8.
    const Tensor n = (y * 10.0).to(DType::Int64), d = (y * 4.0).to(DType::Int64) * 2.0 + 3.0;
    const Tensor pixels = (y * 10.0 + 20.0).to(DType::UInt8);
    const Tensor q = floor_divide(n, d) + remainder(n, -d) * 10.0 + floor_divide(n, -4.0) * 100.0 + (n % 3.0) * 1000.0;
    return q.to(DType::Float32) + (floor_divide(pixels, 3.0) + pixels % 7.0).to(DType::Float32) * 10000.0 + y;
  });
  out = check_masks_export(integers, x);
  CHECK_MESSAGE(out.find("'Mod'") != std::string::npos, out);
}

TEST_CASE("round with decimals, integer clamp and the number-first // and % export and compute Loom's values") {
  const Tensor x = tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4});
  Fn floats([](const Tensor& y) {
    // -2.675 to 2 decimals is -2.68 (its product with 100 rounds to -267.5); 1 // 0.1 is 9.
    const Tensor divisor = masked_fill(y, y == 0.0, 0.7), tenth = y * 0.0 + 0.1;
    return round(y * 2.675, 2) + round(y * 1234.5, -2) * 10.0 + round(y * 5.0, 0) * 100.0 +
           floor_divide(7.0, divisor) * 1000.0 + remainder(-1.0, divisor) * 10000.0 +
           (floor_divide(1.0, tenth) + 1.0 % tenth) * 100000.0;
  });
  CHECK(testing::values(round(x * 2.675, 2)).back() == static_cast<double>(5.35f));
  std::string out = check_masks_export(floats, x);
  for (const char* node : {"'Round'", "'Mul'", "'Div'", "'Mod'", "'Floor'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
  Fn integers([](const Tensor& y) {
    // n = -15, -10, -5, 0, 1, 2, 3, 20; d odd, so never 0: -9, -5, -1, 3, 3, 5, 5, 19; pixels uint8.
    const Tensor n = (y * 10.0).to(DType::Int64), d = (y * 4.0).to(DType::Int64) * 2.0 + 3.0;
    const Tensor pixels = (y * 10.0 + 20.0).to(DType::UInt8), mask = y > 0.2;
    // int64 in its dtype, a uint8 min of -1 dropped, a mask as int64, a fractional bound in float32
    const Tensor clamped = clamp(n, -6.0, 2.0) + clamp(pixels, -1.0, 25.0) * 10.0 + clamp(mask, 0.0, 0.0) * 7.0;
    const Tensor q = remainder(7.0, d) + floor_divide(-7.0, d) * 100.0 + clamped * 10000.0;
    return q.to(DType::Float32) + clamp(n, 1.5, std::nullopt) + y;
  });
  CHECK(clamp((x * 10.0).to(DType::Int64), 1.5, std::nullopt).dtype() == DType::Float32);
  out = check_masks_export(integers, x);
  for (const char* node : {"'Clip'", "'Mod'", "'Cast'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
  TempDir dir;
  Custom in_place([](const Tensor& y) {
    Tensor z = relu(y);
    z %= 2.0;
    return z;
  });
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(in_place, {x}, (dir.path / "r.onnx").string()), onnx::ExportError,
                             "op 'remainder_' (#2 of the trace): an in-place update has no ONNX form");
}

TEST_CASE("scatter, scatter_add, index_add, bincount, masked_select and nonzero export and compute Loom's values") {
  Fn scattered([](const Tensor& y) {
    const Tensor order = argsort(y, 1);  // int64 (N, 4), a permutation per row
    const Tensor moved = scatter(y * 0.0, 1, order, y) + scatter(y, 1, order.narrow(1, 0, 2), y * 3.0) * 10.0 +
                         scatter(y, 1, order.narrow(1, 1, 2), 7.0) * 100.0;  // src's corner; a value
    const Tensor added = scatter_add(y, 0, remainder(order, 2.0), y * 10.0) +  // rows meet at 0 and 1
                         index_add(y, 1, tensor({3, 0, 3}, {3}, {.dtype = DType::Int64}), y.narrow(1, 0, 3), 0.5) * 10.0;
    const Tensor counts = bincount(order.reshape({-1}), y.reshape({-1})).unsqueeze(0) +  // (1, 4) float32 sums
                          bincount(order.select(1, 0), {}, 6).narrow(0, 0, 4).to(DType::Float32).unsqueeze(0) * 10.0;
    const Tensor coordinates = nonzero(y > 0.2).to(DType::Float32);  // (K, 2)
    const Tensor picked = cumsum(masked_select(y, y > 0.0), 0).sum() +
                          masked_select(y, tensor({1, 0, 1, 1}, {4}) > 0.5).sum() * 10.0 +  // a broadcast mask
                          cumsum(coordinates, 0).select(1, 0).sum() * 100.0 + coordinates.select(1, 1).sum() * 1000.0;
    return moved + added * 100.0 + counts * 1000.0 + picked;
  });
  const std::string out =
      check_masks_export(scattered, tensor({0.3, -1.5, 2.0, 0.1, -0.5, 0.25, -1.0, 0.7}, {2, 4}), 1e-6);
  for (const char* node : {"'ScatterElements'", "'Compress'", "'NonZero'", "'Transpose'", "'ReduceMax'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
  TempDir dir;
  const std::string path = (dir.path / "n.onnx").string();
  Fn positions([](const Tensor& y) { return nonzero(y > 0.0); });  // a fixed batch: K still follows the values
  onnx::export_model(positions, {randn({2, 4})}, path, {.dynamic_batch = false});
  const std::string shapes = describe(path);
  CHECK_MESSAGE(shapes.find("('output', ['output_dim0', 'output_dim1'])") != std::string::npos, shapes);
  Fn scalar_positions([](const Tensor& y) { return nonzero(y.sum()); });
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(scalar_positions, {randn({2, 4})}, path), onnx::ExportError,
                             "NonZero of a 0-d tensor");
}

TEST_CASE("sin, cos and exp export, integers cast to float32, and compute Loom's values within an ulp") {
  Fn waves([](const Tensor& y) {
    const Tensor counts = (y * 10.0).to(DType::Int64);
    return sin(y * 3.0) * 2.0 + cos(y * 5.0) + sin(counts) * 0.5 + cos(counts) + exp(counts * 0.0 + 1.0);
  });
  const std::string out = check_masks_export(waves, tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4}), 1e-6);
  for (const char* node : {"'Sin'", "'Cos'", "'Exp'", "'Cast'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("isclose exports and computes Loom's values: tolerances, infinities, NaN with and without equal_nan") {
  Fn masks([](const Tensor& y) {
    const Tensor inf = y * 1e38 * 1e38;  // +-inf where y != 0, else 0
    const Tensor nan = inf - inf;        // NaN where y != 0, else 0
    const Tensor within = isclose(y, y * 1.01 + 0.001, 0.005, 0.002);  // true for the small |y| only
    const Tensor infinite = isclose(y, inf);                             // an infinite difference is never close
    const Tensor same_inf = isclose(inf, inf * 2.0);
    const Tensor nan_equal = isclose(nan, nan, 1e-5, 1e-8, /*equal_nan=*/true);
    const Tensor nan_apart = isclose(nan, y);
    return within.to(DType::Float32) + infinite.to(DType::Float32) * 10.0 + same_inf.to(DType::Float32) * 100.0 +
           nan_equal.to(DType::Float32) * 1000.0 + nan_apart.to(DType::Float32) * 10000.0;
  });
  const Tensor x = tensor({-1.5, -1.0, -0.5, 0.0, 0.1, 0.25, 0.3, 2.0}, {2, 4});
  // torch 1.13 gives these for the same expression
  CHECK(testing::values(masks(x)) == std::vector<double>{1100, 1100, 1101, 11111, 1101, 1100, 1100, 1100});
  const std::string out = check_masks_export(masks, x);
  for (const char* node : {"'Abs'", "'IsInf'", "'IsNaN'", "'LessOrEqual'"}) {
    CHECK_MESSAGE(out.find(node) != std::string::npos, node << " missing from " << out);
  }
}

TEST_CASE("batch_norm_activation exports as BatchNormalization, the residual's Add and the row's ONNX form") {
  TempDir dir;
  const std::string path = (dir.path / "bn_act.onnx").string();
  const Tensor mean = randn({3}), var = add(rand({3}), 0.5), gamma = randn({3}), beta = randn({3});
  const BatchNormOptions eval{.training = false};
  Fn net([&](const Tensor& x) {
    Tensor a = batch_norm_activation(x, mean, var, gamma, beta, eval, ActivationKind::Relu6);
    Tensor b = batch_norm_activation(a, mean, var, gamma, beta, eval, ActivationKind::Hardtanh, {-0.5, 2.0}, x);
    return batch_norm_activation(b, mean, var, Tensor(), Tensor(), eval, ActivationKind::Silu);
  });
  onnx::export_model(net, {randn({2, 3, 4, 4})}, path);
  // The op types but constants and the output's Identity, then each Clip's bounds.
  auto [out, status] = run(
      "/usr/bin/python3 -c \"import onnx,sys; from onnx import numpy_helper as h; m=onnx.load(sys.argv[1]); "
      "onnx.checker.check_model(m, full_check=True); g=m.graph; "
      "c={n.output[0]: h.to_array(n.attribute[0].t).tolist() for n in g.node if n.op_type=='Constant'}; "
      "print([n.op_type for n in g.node if n.op_type not in ('Constant', 'Identity')], "
      "[(c[n.input[1]], c[n.input[2]]) for n in g.node if n.op_type=='Clip'])\" " + path);
  CHECK_MESSAGE(status == 0, out);
  CHECK_MESSAGE(out.find("['BatchNormalization', 'Clip', 'BatchNormalization', 'Add', 'Clip', 'BatchNormalization', "
                         "'Sigmoid', 'Mul'] [(0.0, 6.0), (-0.5, 2.0)]") != std::string::npos,
                out);
}

// A recurrent module's output, final h and (LSTM) final c, flattened end to end.
// With `given_state` the initial h is tanh of the first step's first H
// features and c half of it (one layer, one direction); else both are zeros,
// left out of the export.
class Recurrent : public nn::Module {
 public:
  Recurrent(std::shared_ptr<nn::RNNBase> rnn, bool given_state) : given_state_(given_state) {
    rnn_ = register_module("rnn", std::move(rnn));
  }
  Tensor forward(const Tensor& x) override {
    RnnState state;
    if (given_state_) {
      const Tensor first = rnn_->batch_first() ? x.select(1, 0) : x.select(0, 0);
      state.h = tanh(first.narrow(1, 0, rnn_->hidden_size())).unsqueeze(0);
      if (rnn_->mode() == RnnMode::Lstm) state.c = mul(state.h, 0.5);
    }
    const nn::RNNOutput out = (*rnn_)(x, state);
    std::vector<Tensor> parts{out.output.flatten(), out.state.h.flatten()};
    if (out.state.c.defined()) parts.push_back(out.state.c.flatten());
    return cat(parts, 0);
  }

 private:
  std::shared_ptr<nn::RNNBase> rnn_;
  bool given_state_;
};

// A cell run over x's steps (N, L, F), from zeros: every h, then the last c.
class CellLoop : public nn::Module {
 public:
  explicit CellLoop(std::shared_ptr<nn::RNNCellBase> cell) { cell_ = register_module("cell", std::move(cell)); }
  Tensor forward(const Tensor& x) override {
    RnnState state;
    std::vector<Tensor> hs;
    for (int64_t t = 0; t < x.size(1); ++t) {
      state = (*cell_)(x.select(1, t), state);
      hs.push_back(state.h);
    }
    if (state.c.defined()) hs.push_back(state.c);
    return stack(hs, 0);
  }

 private:
  std::shared_ptr<nn::RNNCellBase> cell_;
};

TEST_CASE("RNN, LSTM and GRU layers and cells export as ONNX's RNN, LSTM and GRU nodes and compute Loom's values") {
  manual_seed(3);
  const auto exported = [](nn::Module& m, const Tensor& x, const Tensor& other) {
    m.eval();
    return check_masks_export(m, x, 1e-4, other);
  };
  SUBCASE("LSTM: two layers, both directions, batch first; another batch size") {
    Recurrent m(std::make_shared<nn::LSTM>(4, 6, nn::RNNOptions{.num_layers = 2, .batch_first = true,
                                                                .bidirectional = true}),
                false);
    const std::string out = exported(m, randn({3, 5, 4}), randn({2, 5, 4}));
    CHECK_MESSAGE(out.find("'LSTM'") != std::string::npos, out);
  }
  SUBCASE("LSTM with proj_size, both directions, batch first: its steps' own ops, for one sequence length") {
    Recurrent m(std::make_shared<nn::LSTM>(
                    4, 6, nn::RNNOptions{.batch_first = true, .bidirectional = true, .proj_size = 2}),
                false);
    const std::string out = exported(m, randn({3, 5, 4}), randn({2, 5, 4}));
    CHECK_MESSAGE(out.find("'MatMul'") != std::string::npos, out);
  }
  SUBCASE("LSTM and GRU from a given state; another sequence length") {
    Recurrent lstm(std::make_shared<nn::LSTM>(5, 3), true);
    CHECK(exported(lstm, randn({4, 2, 5}), randn({7, 2, 5})).find("'LSTM'") != std::string::npos);
    Recurrent gru(std::make_shared<nn::GRU>(5, 3), true);
    CHECK(exported(gru, randn({4, 2, 5}), randn({6, 2, 5})).find("'GRU'") != std::string::npos);
  }
  SUBCASE("GRU, two layers, both directions; RNN with ReLU and without bias, and with tanh") {
    Recurrent gru(std::make_shared<nn::GRU>(3, 4, nn::RNNOptions{.num_layers = 2, .bidirectional = true}), false);
    CHECK(exported(gru, randn({5, 2, 3}), Tensor()).find("'GRU'") != std::string::npos);
    Recurrent relu(std::make_shared<nn::RNN>(3, 4, nn::RNNOptions{.num_layers = 2,
                                                                  .nonlinearity = nn::RNNNonlinearity::ReLU,
                                                                  .bias = false, .bidirectional = true}),
                   false);
    CHECK(exported(relu, randn({5, 2, 3}), Tensor()).find("'RNN'") != std::string::npos);
    Recurrent tanh_rnn(std::make_shared<nn::RNN>(5, 4, nn::RNNOptions{.batch_first = true}), true);
    CHECK(exported(tanh_rnn, randn({2, 3, 5}), randn({4, 3, 5})).find("'RNN'") != std::string::npos);
  }
  SUBCASE("LSTMCell, GRUCell and RNNCell over the steps") {
    CellLoop lstm(std::make_shared<nn::LSTMCell>(3, 4));
    CHECK(exported(lstm, randn({2, 3, 3}), randn({5, 3, 3})).find("'LSTM'") != std::string::npos);
    CellLoop gru(std::make_shared<nn::GRUCell>(3, 4));
    CHECK(exported(gru, randn({2, 3, 3}), randn({1, 3, 3})).find("'GRU'") != std::string::npos);
    CellLoop rnn(std::make_shared<nn::RNNCell>(3, 4, nn::RNNCellOptions{.bias = false}));
    CHECK(exported(rnn, randn({2, 3, 3}), Tensor()).find("'RNN'") != std::string::npos);
  }
}

// Self-attention with torch.nn's masks, returning the output or the averaged weights.
class MaskedAttention : public nn::Module {
 public:
  MaskedAttention(Tensor mask, bool causal, bool weights)
      : mask_(std::move(mask)), causal_(causal), weights_(weights) {
    mha_ = register_module("mha", nn::MultiheadAttention(8, 2, {.batch_first = true}));
  }
  Tensor forward(const Tensor& x) override {
    const nn::AttentionOutput out =
        (*mha_)(x, x, x, {.need_weights = weights_, .attn_mask = mask_, .is_causal = causal_});
    return weights_ ? out.weights : out.output;
  }

 private:
  Tensor mask_;
  bool causal_, weights_;
  std::shared_ptr<nn::MultiheadAttention> mha_;
};

TEST_CASE("attention with a Bool, added or causal mask exports and computes Loom's values, empty rows as zeros") {
  manual_seed(4);
  Tensor blocked = rand({5, 5}) < 0.3;
  blocked = masked_fill(blocked, tensor({1, 0, 0, 0, 0}, {5, 1}, {.dtype = DType::Bool}), 1.0);  // row 0: no key
  const Tensor added = masked_fill(randn({5, 5}), rand({5, 5}) < 0.2, -INFINITY);
  for (const bool weights : {false, true}) {
    CAPTURE(weights);
    MaskedAttention bool_mask(blocked, false, weights), float_mask(added, false, weights), causal({}, true, weights);
    for (nn::Module* m : {static_cast<nn::Module*>(&bool_mask), static_cast<nn::Module*>(&float_mask),
                          static_cast<nn::Module*>(&causal)}) {
      m->eval();
      const std::string out = check_masks_export(*m, randn({2, 5, 8}), 1e-5, randn({3, 5, 8}));
      CHECK_MESSAGE(out.find("'Softmax'") != std::string::npos, out);
    }
  }
  // Row 0 of the Bool mask blocks every key: zero weights there, not NaN.
  MaskedAttention probe(blocked, false, true);
  probe.eval();
  const Tensor w = probe(randn({2, 5, 8}));
  CHECK(max(abs(w.select(1, 0))).item() == 0);
  CHECK(sum(isnan(w)).item() == 0);
}

// nn::Transformer over one sequence as both source and target, the target causal.
class SelfTransformer : public nn::Module {
 public:
  SelfTransformer() {
    model_ = register_module("model", nn::Transformer({.d_model = 8, .nhead = 2, .num_encoder_layers = 1,
                                                        .num_decoder_layers = 2, .dim_feedforward = 16,
                                                        .batch_first = true}));
  }
  Tensor forward(const Tensor& x) override { return (*model_)(x, x, {.tgt_is_causal = true}); }

 private:
  std::shared_ptr<nn::Transformer> model_;
};

TEST_CASE("nn::Transformer exports: the encoder's memory feeding the decoder's causal self- and cross-attention") {
  manual_seed(5);
  SelfTransformer m;
  m.eval();
  const std::string out = check_masks_export(m, randn({2, 5, 8}), 1e-5, randn({3, 5, 8}));
  CHECK_MESSAGE(out.find("'Softmax'") != std::string::npos, out);
}

TEST_CASE("what has no ONNX form is refused, naming the op and the module") {
  TempDir dir;
  const std::string path = (dir.path / "m.onnx").string();
  const Tensor x = randn({2, 4});
  Custom in_place([](const Tensor& y) {
    Tensor z = relu(y);
    add_(z, 1.0);
    return z;
  });
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(in_place, {x}, path), onnx::ExportError,
                             "op 'add_' (#2 of the trace): an in-place update has no ONNX form");
  Custom train_dropout([](const Tensor& y) { return dropout(y, 0.5, /*training=*/true); });
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(train_dropout, {x}, path), onnx::ExportError,
                             "dropout in training mode");
  Custom indices([](const Tensor& y) { return max_pool2d_with_indices(y.reshape({y.size(0), 1, 2, 2}), {.kernel_size = {2, 2}}).values; });
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(indices, {x}, path), onnx::ExportError,
                             "op 'max_pool2d_with_indices'");
  nn::Sequential no_stats(nn::BatchNorm2d(1, {.track_running_stats = false}));
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(no_stats, {randn({2, 1, 3, 3})}, path), onnx::ExportError,
                             "op 'batch_norm' (#0 of the trace, in module '0'): batch statistics");
  CHECK_FALSE(std::filesystem::exists(path));
}

TEST_CASE("a forward that depends on the values, or makes batch-sized constants, is refused") {
  TempDir dir;
  const std::string path = (dir.path / "m.onnx").string();
  Fn constant([](const Tensor& y) { return add(y, ones({y.size(0), 4})); });
  const Tensor x = randn({2, 4});
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(constant, {x}, path), onnx::ExportError,
                             "changed shape from (2, 4) to (3, 4)");
  onnx::export_model(constant, {x}, path, {.dynamic_batch = false});  // a fixed batch may bake it in
  CHECK(std::filesystem::exists(path));
  // The second run's input is x * 0.75 + 0.5: -1 becomes -0.25, on the other side of -0.5.
  Fn branch([](const Tensor& y) { return y.at({0, 0}) > -0.5 ? relu(y) : sigmoid(y); });
  CHECK_THROWS_WITH_FRAGMENT(onnx::export_model(branch, {full({2, 4}, -1.0)}, path), onnx::ExportError,
                             "at op 'sigmoid' (#0 of the trace): the other run had 'relu' there");
}
