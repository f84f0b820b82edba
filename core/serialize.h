// File: core/serialize.h
// Everything Loom writes to disk for models: safetensors files
// (core/safetensors.h) and training checkpoints (core/checkpoint.h). Include
// the one you need; this header includes both.
#pragma once

#include "core/checkpoint.h"
#include "core/safetensors.h"
