// File: core/onednn/library.h
// oneDNN (Debian's libdnnl2, 2.6), loaded at its first use rather than linked,
// and the entry points of its C API that the CPU's fast tier calls. Debian
// builds oneDNN on GNU OpenMP: loading it late lets Loom's thread pool load
// libgomp first with its own settings (core/parallel.cc), so that oneDNN's
// regions run on Loom's threads.
//
//   const onednn::Library* lib = onednn::library();  // null: not installed
//   LOOM_DNNL_CHECK(lib->memory_create(&memory, &desc, lib->engine, data));
#pragma once

#include <oneapi/dnnl/dnnl.h>

#include <string>

namespace loom::onednn {

struct Library {
  decltype(&dnnl_engine_create) engine_create = nullptr;
  decltype(&dnnl_stream_create) stream_create = nullptr;
  decltype(&dnnl_stream_destroy) stream_destroy = nullptr;
  decltype(&dnnl_memory_desc_init_by_tag) memory_desc_init_by_tag = nullptr;
  decltype(&dnnl_memory_desc_init_by_strides) memory_desc_init_by_strides = nullptr;
  decltype(&dnnl_memory_desc_get_size) memory_desc_get_size = nullptr;
  decltype(&dnnl_memory_desc_equal) memory_desc_equal = nullptr;
  decltype(&dnnl_memory_create) memory_create = nullptr;
  decltype(&dnnl_memory_destroy) memory_destroy = nullptr;
  decltype(&dnnl_primitive_attr_create) primitive_attr_create = nullptr;
  decltype(&dnnl_primitive_attr_destroy) primitive_attr_destroy = nullptr;
  decltype(&dnnl_primitive_attr_set_scratchpad_mode) primitive_attr_set_scratchpad_mode = nullptr;
  decltype(&dnnl_primitive_attr_set_post_ops) primitive_attr_set_post_ops = nullptr;
  decltype(&dnnl_post_ops_create) post_ops_create = nullptr;
  decltype(&dnnl_post_ops_destroy) post_ops_destroy = nullptr;
  decltype(&dnnl_post_ops_append_eltwise) post_ops_append_eltwise = nullptr;
  decltype(&dnnl_post_ops_append_sum) post_ops_append_sum = nullptr;
  decltype(&dnnl_primitive_desc_iterator_create) primitive_desc_iterator_create = nullptr;
  decltype(&dnnl_primitive_desc_iterator_next) primitive_desc_iterator_next = nullptr;
  decltype(&dnnl_primitive_desc_iterator_fetch) primitive_desc_iterator_fetch = nullptr;
  decltype(&dnnl_primitive_desc_iterator_destroy) primitive_desc_iterator_destroy = nullptr;
  decltype(&dnnl_primitive_desc_destroy) primitive_desc_destroy = nullptr;
  decltype(&dnnl_primitive_desc_query) primitive_desc_query = nullptr;
  decltype(&dnnl_primitive_desc_query_md) primitive_desc_query_md = nullptr;
  decltype(&dnnl_primitive_create) primitive_create = nullptr;
  decltype(&dnnl_primitive_destroy) primitive_destroy = nullptr;
  decltype(&dnnl_primitive_execute) primitive_execute = nullptr;
  decltype(&dnnl_reorder_primitive_desc_create) reorder_primitive_desc_create = nullptr;
  decltype(&dnnl_dilated_convolution_forward_desc_init) convolution_forward_desc_init = nullptr;
  decltype(&dnnl_dilated_convolution_backward_data_desc_init) convolution_backward_data_desc_init =
      nullptr;
  decltype(&dnnl_dilated_convolution_backward_weights_desc_init)
      convolution_backward_weights_desc_init = nullptr;
  decltype(&dnnl_batch_normalization_forward_desc_init) batch_normalization_forward_desc_init =
      nullptr;
  decltype(&dnnl_batch_normalization_backward_desc_init) batch_normalization_backward_desc_init =
      nullptr;
  decltype(&dnnl_pooling_v2_forward_desc_init) pooling_forward_desc_init = nullptr;
  decltype(&dnnl_pooling_v2_backward_desc_init) pooling_backward_desc_init = nullptr;
  decltype(&dnnl_eltwise_forward_desc_init) eltwise_forward_desc_init = nullptr;
  decltype(&dnnl_eltwise_backward_desc_init) eltwise_backward_desc_init = nullptr;
  decltype(&dnnl_softmax_v2_forward_desc_init) softmax_forward_desc_init = nullptr;
  decltype(&dnnl_softmax_v2_backward_desc_init) softmax_backward_desc_init = nullptr;
  decltype(&dnnl_matmul_desc_init) matmul_desc_init = nullptr;
  decltype(&dnnl_version) version = nullptr;
  decltype(&dnnl_get_effective_cpu_isa) get_effective_cpu_isa = nullptr;

  dnnl_engine_t engine = nullptr;  // the CPU engine, shared by every primitive
};

// Loads libdnnl.so.2 once (thread-safe) and creates the CPU engine; null when
// the library is not installed (load_failure() says why). Loads Loom's thread
// pool first (see above).
const Library* library();
std::string load_failure();

// The calling thread's stream on the CPU engine (execution is synchronous).
dnnl_stream_t thread_stream();

// Throws OnednnError naming the call, the status and the file:line unless
// `status` is dnnl_success.
void check(dnnl_status_t status, const char* call, const char* file, int line);

// "2.6.3, avx512_core": what the tier runs, for explain() and the benchmarks.
std::string describe();

}  // namespace loom::onednn

#define LOOM_DNNL_CHECK(call) ::loom::onednn::check((call), #call, __FILE__, __LINE__)
