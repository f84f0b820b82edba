// File: core/cuda/capture.h
// What host code asks of the calling thread's stream (stream.h) without
// holding it: is a CUDA graph being captured, and wait for the queued work.
// No CUDA types, so core/ops includes it in every build.
#pragma once

namespace loom::cuda {

// Waits for everything queued on the current stream.
void synchronize();
// True while the current stream is capturing a CUDA graph.
bool is_capturing();

}  // namespace loom::cuda
