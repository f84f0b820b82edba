// File: core/onednn/library.cc
// See library.h: the run-time load of libdnnl.so.2, its entry points, and the
// checked-call helper.
#include "core/onednn/library.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <memory>
#include <mutex>

#include "core/error.h"
#include "core/parallel.h"

namespace loom::onednn {
namespace {

const char* status_name(dnnl_status_t status) {
  switch (status) {
    case dnnl_success: return "success";
    case dnnl_out_of_memory: return "out_of_memory";
    case dnnl_invalid_arguments: return "invalid_arguments";
    case dnnl_unimplemented: return "unimplemented";
    case dnnl_iterator_ends: return "iterator_ends";
    case dnnl_runtime_error: return "runtime_error";
    case dnnl_not_required: return "not_required";
  }
  return "unknown status";
}

// Sets `entry` to the library's symbol `name`; false when it lacks it.
template <class Fn>
bool bind(void* handle, Fn& entry, const char* name) {
  entry = reinterpret_cast<Fn>(dlsym(handle, name));
  return entry != nullptr;
}

bool bind_all(void* h, Library& l) {
  return bind(h, l.engine_create, "dnnl_engine_create") &&
         bind(h, l.stream_create, "dnnl_stream_create") &&
         bind(h, l.stream_destroy, "dnnl_stream_destroy") &&
         bind(h, l.memory_desc_init_by_tag, "dnnl_memory_desc_init_by_tag") &&
         bind(h, l.memory_desc_init_by_strides, "dnnl_memory_desc_init_by_strides") &&
         bind(h, l.memory_desc_get_size, "dnnl_memory_desc_get_size") &&
         bind(h, l.memory_desc_equal, "dnnl_memory_desc_equal") &&
         bind(h, l.memory_create, "dnnl_memory_create") &&
         bind(h, l.memory_destroy, "dnnl_memory_destroy") &&
         bind(h, l.primitive_attr_create, "dnnl_primitive_attr_create") &&
         bind(h, l.primitive_attr_destroy, "dnnl_primitive_attr_destroy") &&
         bind(h, l.primitive_attr_set_scratchpad_mode, "dnnl_primitive_attr_set_scratchpad_mode") &&
         bind(h, l.primitive_attr_set_post_ops, "dnnl_primitive_attr_set_post_ops") &&
         bind(h, l.post_ops_create, "dnnl_post_ops_create") &&
         bind(h, l.post_ops_destroy, "dnnl_post_ops_destroy") &&
         bind(h, l.post_ops_append_eltwise, "dnnl_post_ops_append_eltwise") &&
         bind(h, l.post_ops_append_sum, "dnnl_post_ops_append_sum") &&
         bind(h, l.primitive_desc_iterator_create, "dnnl_primitive_desc_iterator_create") &&
         bind(h, l.primitive_desc_iterator_next, "dnnl_primitive_desc_iterator_next") &&
         bind(h, l.primitive_desc_iterator_fetch, "dnnl_primitive_desc_iterator_fetch") &&
         bind(h, l.primitive_desc_iterator_destroy, "dnnl_primitive_desc_iterator_destroy") &&
         bind(h, l.primitive_desc_destroy, "dnnl_primitive_desc_destroy") &&
         bind(h, l.primitive_desc_query, "dnnl_primitive_desc_query") &&
         bind(h, l.primitive_desc_query_md, "dnnl_primitive_desc_query_md") &&
         bind(h, l.primitive_create, "dnnl_primitive_create") &&
         bind(h, l.primitive_destroy, "dnnl_primitive_destroy") &&
         bind(h, l.primitive_execute, "dnnl_primitive_execute") &&
         bind(h, l.reorder_primitive_desc_create, "dnnl_reorder_primitive_desc_create") &&
         bind(h, l.convolution_forward_desc_init, "dnnl_dilated_convolution_forward_desc_init") &&
         bind(h, l.convolution_backward_data_desc_init,
              "dnnl_dilated_convolution_backward_data_desc_init") &&
         bind(h, l.convolution_backward_weights_desc_init,
              "dnnl_dilated_convolution_backward_weights_desc_init") &&
         bind(h, l.batch_normalization_forward_desc_init,
              "dnnl_batch_normalization_forward_desc_init") &&
         bind(h, l.batch_normalization_backward_desc_init,
              "dnnl_batch_normalization_backward_desc_init") &&
         bind(h, l.pooling_forward_desc_init, "dnnl_pooling_v2_forward_desc_init") &&
         bind(h, l.pooling_backward_desc_init, "dnnl_pooling_v2_backward_desc_init") &&
         bind(h, l.eltwise_forward_desc_init, "dnnl_eltwise_forward_desc_init") &&
         bind(h, l.eltwise_backward_desc_init, "dnnl_eltwise_backward_desc_init") &&
         bind(h, l.softmax_forward_desc_init, "dnnl_softmax_v2_forward_desc_init") &&
         bind(h, l.softmax_backward_desc_init, "dnnl_softmax_v2_backward_desc_init") &&
         bind(h, l.matmul_desc_init, "dnnl_matmul_desc_init") &&
         bind(h, l.version, "dnnl_version") &&
         bind(h, l.get_effective_cpu_isa, "dnnl_get_effective_cpu_isa");
}

struct Loaded {
  std::unique_ptr<Library> library;  // null when the load failed
  std::string failure;
};

Loaded load() {
  // The pool's OpenMP runtime first, so that oneDNN finds it loaded with Loom's settings.
  bind_openmp_to_pool();
  void* handle = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return {nullptr, dlerror()};
  auto lib = std::make_unique<Library>();
  if (!bind_all(handle, *lib)) return {nullptr, fmt::format("a symbol is missing: {}", dlerror())};
  const dnnl_status_t status = lib->engine_create(&lib->engine, dnnl_cpu, 0);
  if (status != dnnl_success) {
    return {nullptr, fmt::format("dnnl_engine_create failed: {}", status_name(status))};
  }
  return {std::move(lib), ""};
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const Library* library() { return loaded().library.get(); }

namespace {

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

// Owns a stream and destroys it with its thread.
struct StreamHolder {
  dnnl_stream_t stream = nullptr;
  ~StreamHolder() {
    if (stream != nullptr) library()->stream_destroy(stream);
  }
};

}  // namespace


std::string load_failure() { return loaded().failure; }

dnnl_stream_t thread_stream() {
  thread_local StreamHolder holder;
  if (holder.stream == nullptr) {
    const Library& lib = *library();
    LOOM_DNNL_CHECK(lib.stream_create(&holder.stream, lib.engine, dnnl_stream_default_flags));
  }
  return holder.stream;
}

void check(dnnl_status_t status, const char* call, const char* file, int line) {
  if (status == dnnl_success) return;
  throw OnednnError(fmt::format(
      "[onednn] {} failed: {} ({}:{}); LOOM_CPU_BACKEND=reference runs the reference kernels "
      "instead",
      call, status_name(status), file, line));
}

std::string describe() {
  const Library* lib = library();
  if (lib == nullptr) return "not loaded: " + load_failure();
  const dnnl_version_t* v = lib->version();
  return fmt::format("oneDNN {}.{}.{}, {}", v->major, v->minor, v->patch,
                     isa_name(lib->get_effective_cpu_isa()));
}

}  // namespace loom::onednn
