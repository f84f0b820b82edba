// File: layers/embedding.cc
// Embedding: the table's initialisation and the lookup.
#include "layers/embedding.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/ops/embedding.h"

namespace loom::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options) {
  LOOM_CHECK(num_embeddings > 0 && embedding_dim > 0, ValueError,
             "[Embedding] num_embeddings and embedding_dim must be positive, got {} and {}",
             num_embeddings, embedding_dim);
  weight_ = register_parameter(
      "weight", randn({num_embeddings, embedding_dim}, {}, options.generator));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight_, indices); }

std::string Embedding::extra_repr() const {
  return fmt::format("{}, {}", num_embeddings(), embedding_dim());
}

}  // namespace loom::nn
