// File: onnx/proto.cc
// Protobuf's wire format for the ONNX messages, field numbers from onnx.proto.
#include "onnx/proto.h"

#include <cstring>

#include "core/error.h"

namespace loom::onnx::proto {

namespace {

constexpr int kVarint = 0, kFixed32 = 5, kLengthDelimited = 2;

// AttributeProto.AttributeType
constexpr int64_t kFloat = 1, kInt = 2, kString = 3, kTensor = 4, kFloats = 6, kInts = 7, kStrings = 8;

Encoded encode_tensor(const TensorValue& t, std::vector<Tensor>& keep) {
  Encoded e;
  for (int64_t d : t.value.sizes()) e.add_varint(1, static_cast<uint64_t>(d));
  e.add_varint(2, static_cast<uint64_t>(element_type(t.value.dtype())));
  e.add_bytes(8, t.name);
  // Bool is one byte per element in both; the others are little-endian as the CPU's.
  Tensor host = t.value.detach().cpu().contiguous();
  keep.push_back(host);
  e.add_external(9, static_cast<const char*>(host.raw_data()),
                 static_cast<uint64_t>(host.numel()) * element_size(host.dtype()));
  return e;
}

Encoded encode_attribute(const Attribute& a, std::vector<Tensor>& keep) {
  Encoded e;
  e.add_bytes(1, a.name);
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, float>) {
          e.add_float(2, v);
          e.add_varint(20, kFloat);
        } else if constexpr (std::is_same_v<V, int64_t>) {
          e.add_varint(3, static_cast<uint64_t>(v));
          e.add_varint(20, kInt);
        } else if constexpr (std::is_same_v<V, std::string>) {
          e.add_bytes(4, v);
          e.add_varint(20, kString);
        } else if constexpr (std::is_same_v<V, std::vector<float>>) {
          for (float f : v) e.add_float(7, f);
          e.add_varint(20, kFloats);
        } else if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
          for (int64_t i : v) e.add_varint(8, static_cast<uint64_t>(i));
          e.add_varint(20, kInts);
        } else if constexpr (std::is_same_v<V, std::vector<std::string>>) {
          for (const std::string& text : v) e.add_bytes(9, text);
          e.add_varint(20, kStrings);
        } else {
          e.add_message(5, encode_tensor(v, keep));
          e.add_varint(20, kTensor);
        }
      },
      a.value);
  return e;
}

Encoded encode_node(const Node& n, std::vector<Tensor>& keep) {
  Encoded e;
  for (const std::string& in : n.inputs) e.add_bytes(1, in);
  for (const std::string& out : n.outputs) e.add_bytes(2, out);
  e.add_bytes(3, n.name);
  e.add_bytes(4, n.op_type);
  for (const Attribute& a : n.attributes) e.add_message(5, encode_attribute(a, keep));
  return e;
}

// ValueInfoProto { name, TypeProto { tensor_type { elem_type, shape { dim* } } } }
Encoded encode_value_info(const ValueInfo& v) {
  Encoded shape;
  for (const Dim& d : v.shape) {
    Encoded dim;
    if (const int64_t* size = std::get_if<int64_t>(&d)) {
      dim.add_varint(1, static_cast<uint64_t>(*size));
    } else {
      dim.add_bytes(2, std::get<std::string>(d));
    }
    shape.add_message(1, std::move(dim));
  }
  Encoded tensor_type;
  tensor_type.add_varint(1, static_cast<uint64_t>(v.type));
  tensor_type.add_message(2, std::move(shape));
  Encoded type;
  type.add_message(1, std::move(tensor_type));
  Encoded e;
  e.add_bytes(1, v.name);
  e.add_message(2, std::move(type));
  return e;
}

Encoded encode_graph(const Graph& g, std::vector<Tensor>& keep) {
  Encoded e;
  for (const Node& n : g.nodes) e.add_message(1, encode_node(n, keep));
  e.add_bytes(2, g.name);
  for (const TensorValue& t : g.initializers) e.add_message(5, encode_tensor(t, keep));
  for (const ValueInfo& v : g.inputs) e.add_message(11, encode_value_info(v));
  for (const ValueInfo& v : g.outputs) e.add_message(12, encode_value_info(v));
  return e;
}

}  // namespace

ElementType element_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ElementType::Float;
    case DType::Float64: return ElementType::Double;
    case DType::Float16: return ElementType::Float16;
    case DType::BFloat16: return ElementType::BFloat16;
    case DType::Int32: return ElementType::Int32;
    case DType::Int64: return ElementType::Int64;
    case DType::UInt8: return ElementType::UInt8;
    case DType::Bool: return ElementType::Bool;
    default: break;
  }
  throw ValueError(fmt::format("[onnx] dtype {} has no ONNX element type here; convert the tensor with .to()",
                               dtype_name(dtype)));
}

std::string Encoded::str() const {
  std::string out;
  out.reserve(size_);
  for (const Chunk& c : chunks_) out.append(c.data != nullptr ? std::string_view(c.data, c.size) : c.owned);
  return out;
}

void Encoded::raw(std::string_view bytes) {
  if (chunks_.empty() || chunks_.back().data != nullptr) chunks_.push_back({});
  chunks_.back().owned.append(bytes);
  chunks_.back().size = chunks_.back().owned.size();
  size_ += bytes.size();
}

void Encoded::raw_varint(uint64_t value) {
  char buffer[10];
  int n = 0;
  do {
    buffer[n++] = static_cast<char>((value & 0x7f) | (value > 0x7f ? 0x80 : 0));
    value >>= 7;
  } while (value != 0);
  raw(std::string_view(buffer, static_cast<size_t>(n)));
}

void Encoded::key(int field, int wire_type) { raw_varint((static_cast<uint64_t>(field) << 3) | wire_type); }

void Encoded::add_varint(int field, uint64_t value) {
  key(field, kVarint);
  raw_varint(value);
}

void Encoded::add_float(int field, float value) {
  key(field, kFixed32);
  char bytes[4];
  std::memcpy(bytes, &value, 4);  // little-endian, as protobuf's fixed32
  raw(std::string_view(bytes, 4));
}

void Encoded::add_bytes(int field, std::string_view bytes) {
  key(field, kLengthDelimited);
  raw_varint(bytes.size());
  raw(bytes);
}

void Encoded::add_external(int field, const char* data, uint64_t size) {
  key(field, kLengthDelimited);
  raw_varint(size);
  chunks_.push_back({.owned = {}, .data = data, .size = size});
  size_ += size;
}

void Encoded::add_message(int field, Encoded message) {
  key(field, kLengthDelimited);
  raw_varint(message.size_);
  for (Chunk& c : message.chunks_) {
    if (c.data == nullptr) {
      raw(c.owned);
    } else {
      chunks_.push_back(std::move(c));
    }
  }
  size_ += message.size_ - [&] {
    uint64_t owned = 0;  // raw() above already counted the owned chunks
    for (const Chunk& c : message.chunks_) owned += c.data == nullptr ? c.owned.size() : 0;
    return owned;
  }();
}

Encoded encode(const Model& model, std::vector<Tensor>& keep) {
  Encoded e;
  e.add_varint(1, static_cast<uint64_t>(model.ir_version));
  e.add_bytes(2, model.producer_name);
  e.add_bytes(3, model.producer_version);
  e.add_bytes(6, model.doc_string);
  e.add_message(7, encode_graph(model.graph, keep));
  Encoded opset;
  opset.add_bytes(1, "");  // the default domain, ai.onnx
  opset.add_varint(2, static_cast<uint64_t>(model.opset));
  e.add_message(8, std::move(opset));
  return e;
}

}  // namespace loom::onnx::proto
