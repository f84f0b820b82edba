// File: optim/optim.h
// Everything in loom::optim in one include: optimizers, schedules, clipping.
#pragma once

#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/scheduler.h"
#include "optim/sgd.h"
#include "optim/train_step.h"
