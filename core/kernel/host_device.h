// File: core/kernel/host_device.h
// LOOM_HOST_DEVICE, the one definition: the scalar math every backend shares
// is marked with it so that nvcc compiles it for the GPU (__host__ __device__)
// and a plain C++ compiler sees ordinary functions.
#pragma once

#ifdef __CUDACC__
#define LOOM_HOST_DEVICE __host__ __device__
#else
#define LOOM_HOST_DEVICE
#endif
