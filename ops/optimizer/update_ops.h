// The optimizer updates, listed once: each row is an op's name, its functor in
// ops/math/optimizer.h (namespace weft::fn) and its description. The op definitions (update.cc)
// and each device's compute (ops/cpu/optimizer.cc, ops/gpu/optimizer.cc) expand this list. Every
// update takes (weight, grad) and then the functor's kStates state arrays, which it updates in
// place (MutateInputs), and with lr_input=true its kRates rates as a last input (float64);
// its output is the new weight (call it with the weight as the output).
// Their parameters, UpdateParam, are in ops/math/optimizer.h: the kernels take them by value.
#pragma once

#include "ops/math/optimizer.h"

// X(name, functor, description)
#define WEFT_UPDATE_OPS(X)                                                                         \
  X(sgd_update, SgdUpdate,                                                                         \
    "weight - lr * g; call with the weight as output to update it in place")                       \
  X(sgd_mom_update, SgdMomUpdate,                                                                  \
    "mom = momentum * mom - lr * g; weight += mom (updates mom in place)")                         \
  X(adam_update, AdamUpdate,                                                                       \
    "Adam without bias correction: m, v updated in place; weight -= lr * m / (sqrt(v) + epsilon)") \
  X(adamw_update, AdamWUpdate,                                                                     \
    "AdamW: weight *= 1 - decay_rate * wd, then Adam's step on clip(rescale_grad * grad) "         \
    "(torch.optim.AdamW with the bias correction in lr); m, v updated in place")
