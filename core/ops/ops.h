// File: core/ops/ops.h
// Everything functional in one include: tensors, autograd and every op.
#pragma once

#include "core/autograd.h"
#include "core/generator.h"
#include "core/numerics.h"
#include "core/ops/activation.h"
#include "core/ops/compare.h"
#include "core/ops/conv.h"
#include "core/ops/conv_transpose.h"
#include "core/ops/dropout.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/fused.h"
#include "core/ops/indexing.h"
#include "core/ops/linalg.h"
#include "core/ops/loss.h"
#include "core/ops/norm.h"
#include "core/ops/pooling.h"
#include "core/ops/reduction.h"
#include "core/ops/shape_ops.h"
#include "core/ops/softmax.h"
#include "core/tensor.h"
