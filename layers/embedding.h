// File: layers/embedding.h
// Embedding, as torch.nn.Embedding: a learned table of V vectors of D features,
// looked up by integer index (state_dict name "weight", shape (V, D)).
//
//   nn::Embedding embed(1000, 64);
//   Tensor v = embed(tokens);  // tokens (B, T) int64 in [0, 1000) -> (B, T, 64)
#pragma once

#include <cstdint>
#include <string>

#include "core/generator.h"
#include "core/tensor.h"
#include "layers/module.h"

namespace loom::nn {

struct EmbeddingOptions {
  Generator* generator = nullptr;  // for the initial weights; the default generator when null
};

class Embedding : public Module {
 public:
  // weight (V, D) drawn from N(0, 1), as PyTorch does.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});

  Tensor forward(const Tensor& indices) override;  // (*) integers -> (*, D)

  const Tensor& weight() const { return weight_; }
  int64_t num_embeddings() const { return weight_.size(0); }
  int64_t embedding_dim() const { return weight_.size(1); }

  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;  // "1000, 64"

 private:
  Tensor weight_;
};

}  // namespace loom::nn
