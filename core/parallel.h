// File: core/parallel.h
// Loom's CPU thread pool and the one loop that uses it. The CPU kernels split
// their outer loops (images, channels, planes, flat chunks) with parallel_for.
// The pool is the OpenMP runtime's (libgomp, loaded at first use with a passive
// wait policy), which oneDNN's primitives run on too; BLAS runs single-threaded
// inside the loops (core/cpu/gemm.cc). So one set of threads owns the cores,
// LOOM_NUM_THREADS sizes it for all three, and none spins waiting for work.
//
//   parallel_for(0, channels, 1, [&](int64_t begin, int64_t end) {
//     for (int64_t c = begin; c < end; ++c) normalize_channel(c);
//   });
//
// Determinism: the chunks depend only on (begin, end, grain, num_threads()), and
// each index is handled by exactly one call, so a kernel that keeps every sum
// inside one index (a channel's statistics, one image's GEMM) gives the same bits
// at any thread count; one that combines per-chunk partial sums gives the same
// bits for a fixed thread count. A BLAS product split over the chunks (a large
// gemm's rows, a large filter's weight-gradient columns) agrees across thread
// counts to rounding only: OpenBLAS rounds an element differently depending on
// where in a block its row or column falls on some CPUs (its Zen kernels), as
// PyTorch's CPU matmul does not promise the same bits at every thread count.
#pragma once

#include <cstdint>
#include <functional>

namespace loom {

// Threads the pool runs kernels on, the calling thread included: the
// LOOM_NUM_THREADS environment variable when set (a positive integer), else
// the number of cores the process may run on (its CPU affinity mask).
int num_threads();

// Resizes the pool (n >= 1; 1 runs every loop on the caller). Not to be called
// from inside a parallel_for.
void set_num_threads(int n);

// For a library that opens its own OpenMP regions (oneDNN): sets the calling
// thread's OpenMP team size to num_threads(), so that the library's regions
// use the same threads and count as Loom's loops. Call it on the thread that is
// about to call the library (cheap when nothing changed).
void bind_openmp_to_pool();

// bind_openmp_to_pool with a team of n threads (1 <= n <= num_threads()): a
// library call too small to repay waking the pool's sleeping threads runs on
// the calling thread alone (n = 1).
void bind_openmp_threads(int n);

// True on a thread that is running a parallel_for chunk: nested loops run inline.
bool in_parallel_region();

// The chunks parallel_for would use for a range of n indices: at most
// num_threads(), each at least `grain` indices (the last may be shorter).
int64_t parallel_chunks(int64_t n, int64_t grain);

// Calls fn(chunk_begin, chunk_end) for consecutive, disjoint chunks covering
// [begin, end), concurrently on the pool's threads; returns when all are done.
// Runs fn(begin, end) on the caller when there is one chunk or when called
// from inside another parallel_for. An exception from fn is rethrown here (the
// first one; the other chunks still finish).
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

// As parallel_for, with the chunk's index (0 .. parallel_chunks(n, grain) - 1)
// passed first: for kernels that keep one partial result per chunk and combine
// them in chunk order.
void parallel_for_chunks(int64_t begin, int64_t end, int64_t grain,
                         const std::function<void(int64_t chunk, int64_t, int64_t)>& fn);

}  // namespace loom
