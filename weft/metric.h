// Evaluation metrics: running averages over the batches of an epoch. A metric owns its running
// sum and sample count; Update reads the arrays on the host (waiting for the ops that write them).
//
//   Accuracy acc;
//   for (each batch) acc.Update(batch.label, probabilities);   // labels (N,), probabilities (N, C)
//   std::printf("%s %.3f\n", acc.name().c_str(), acc.Get());
//   acc.Reset();
//
// Metrics are an interface because users add their own; one thread drives each metric.
#pragma once

#include <cstdint>
#include <string>

#include "storage/ndarray.h"

namespace weft {

class Metric {
 public:
  virtual ~Metric() = default;
  // Adds a batch: labels (N,) (any shape of N elements), predictions as each metric says.
  // Throws weft::Error when the shapes disagree or a label is not a valid class.
  virtual void Update(const NDArray& labels, const NDArray& predictions) = 0;
  virtual std::string name() const = 0;

  // The mean over every sample since the last Reset (NaN when there was none).
  double Get() const;
  void Reset();
  int64_t num_samples() const { return count_; }

 protected:
  void Add(double sum, int64_t count);

 private:
  double sum_ = 0;
  int64_t count_ = 0;
};

// The fraction of samples whose predicted class is the label. Predictions are scores (N, C),
// whose largest entry per row is the prediction (the first, on ties), or classes of the labels'
// shape. Labels are class indices: in [0, C) with scores, non-negative with classes.
class Accuracy : public Metric {
 public:
  void Update(const NDArray& labels, const NDArray& predictions) override;
  std::string name() const override { return "accuracy"; }
};

// The mean of -log(p[label] + eps) over samples, for probabilities p (N, C) (a softmax's output)
// and labels (N,) that are class indices in [0, C). eps keeps log finite (MXNet's default).
class CrossEntropy : public Metric {
 public:
  explicit CrossEntropy(double eps = 1e-12) : eps_(eps) {}
  void Update(const NDArray& labels, const NDArray& predictions) override;
  std::string name() const override { return "cross-entropy"; }

 private:
  double eps_;
};

}  // namespace weft
