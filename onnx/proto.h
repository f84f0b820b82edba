// File: onnx/proto.h
// The ONNX messages the exporter writes (ModelProto, GraphProto, NodeProto,
// TensorProto, ...) as plain structs, and their protobuf encoding, written
// here from the field numbers of onnx.proto (ONNX 1.12, IR version 8): no
// protobuf library is needed to write a model.
//
//   proto::Model model{.graph = graph};
//   proto::Encoded bytes = proto::encode(model);
//   file.write(...) for each chunk of bytes.chunks()   // tensor data is not copied
//
// Tensor payloads stay in their tensors: an Encoded message is a list of chunks,
// small ones owned, large ones pointing into tensor memory, so a 500 MB model
// is written without a second copy of its weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/tensor.h"

namespace loom::onnx::proto {

// TensorProto.DataType values.
enum class ElementType : int32_t {
  Float = 1,
  UInt8 = 2,
  Int8 = 3,
  Int32 = 6,
  Int64 = 7,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  BFloat16 = 16,
};

// The element type of a Loom dtype; ValueError for one ONNX lacks.
ElementType element_type(DType dtype);

// A constant: its bytes are the tensor's (contiguous, on the CPU, little-endian).
struct TensorValue {
  std::string name;
  Tensor value;
};

struct Attribute {
  std::string name;
  // FLOAT, INT, STRING, FLOATS, INTS, STRINGS or TENSOR.
  std::variant<float, int64_t, std::string, std::vector<float>, std::vector<int64_t>, std::vector<std::string>,
               TensorValue>
      value;
};

struct Node {
  std::string op_type;                  // "Conv"
  std::vector<std::string> inputs;      // "" for an optional input left out
  std::vector<std::string> outputs;
  std::string name;                     // unique in the graph
  std::vector<Attribute> attributes;
};

// One dimension: a fixed size or a symbolic name ("batch").
using Dim = std::variant<int64_t, std::string>;

struct ValueInfo {
  std::string name;
  ElementType type = ElementType::Float;
  std::vector<Dim> shape;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<TensorValue> initializers;
  std::vector<ValueInfo> inputs, outputs;
};

struct Model {
  int64_t ir_version = 8;  // ONNX 1.12's
  int64_t opset = 17;
  std::string producer_name = "loom";
  std::string producer_version;
  std::string doc_string;
  Graph graph;
};

// An encoded message as chunks: owned bytes and views of tensor memory.
class Encoded {
 public:
  struct Chunk {
    std::string owned;
    const char* data = nullptr;  // external bytes, when not null
    uint64_t size = 0;
  };

  uint64_t size() const { return size_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  std::string str() const;  // every chunk joined (tests, small messages)

  // --- writing fields (wire format: varint, 64-bit, length-delimited, 32-bit) ---
  void add_varint(int field, uint64_t value);
  void add_float(int field, float value);
  void add_bytes(int field, std::string_view bytes);
  void add_external(int field, const char* data, uint64_t size);  // not copied
  void add_message(int field, Encoded message);

 private:
  void raw(std::string_view bytes);
  void raw_varint(uint64_t value);
  void key(int field, int wire_type);

  std::vector<Chunk> chunks_;
  uint64_t size_ = 0;
};

// A tensor value kept in CPU contiguous memory for as long as its encoding is
// used: encode() holds it in `keep`.
Encoded encode(const Model& model, std::vector<Tensor>& keep);

}  // namespace loom::onnx::proto
