// weft: the embedding API. Include this, depend on the Bazel target //weft, and you have:
//   NDArray        asynchronous arrays on the engine (storage/ndarray.h)
//   Invoke         any registered op on arrays, with its gradient (weft/imperative.h)
//   op::...        typed op calls and arithmetic operators (weft/ops.h)
//   Symbol         graphs built by composing ops, with a JSON form (graph/symbol.h,
//   weft/symbol_file.h) Executor       a symbol bound to a device and arrays: Forward, Backward
//   (executor/executor.h) SeedRandom     reproducible random numbers (storage/random.h) Save, Load
//   named arrays in safetensors files (weft/serialization.h) ArrayIter, CsvIter, MnistIter batches
//   for training (weft/data_iter.h) Xavier, Uniform, Normal, ...    parameter initializers
//   (weft/initializer.h) SGD, Adam      optimizers that update weights in place (weft/optimizer.h)
//   Trainer        a training step bound as one graph: forward, backward, updates, a learning-rate
//                  schedule (weft/trainer.h, weft/lr_schedule.h); Save/Load resume it exactly
//   Accuracy, CrossEntropy          evaluation metrics (weft/metric.h)
//   Profiler       Start/Stop a trace of ops, GPU kernels and memory (weft/profiler.h)
//   SplitRnnParameters, BuildRnnParameters   the RNN op's weights as PyTorch names them
//   (weft/rnn_params.h)
//
//   #include "weft/weft.h"
//   weft::NDArray x(weft::Shape{2, 3});
//   x.FillUniform(-1, 1);
//   weft::NDArray y = weft::op::relu(x * 2.0);
//   std::vector<float> v = y.ToVector<float>();   // waits for the ops before it
#pragma once

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "engine/engine.h"
#include "executor/executor.h"
#include "graph/symbol.h"
#include "passes/infer.h"
#include "storage/ndarray.h"
#include "storage/random.h"
#include "storage/storage.h"
#include "weft/data_iter.h"
#include "weft/imperative.h"
#include "weft/initializer.h"
#include "weft/lr_schedule.h"
#include "weft/metric.h"
#include "weft/ops.h"
#include "weft/optimizer.h"
#include "weft/profiler.h"
#include "weft/rnn_params.h"
#include "weft/serialization.h"
#include "weft/symbol_file.h"
#include "weft/trainer.h"
