#include "weft/metric.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/tensor_view.h"

namespace weft {

double Metric::Get() const {
  return count_ == 0 ? std::numeric_limits<double>::quiet_NaN()
                     : sum_ / static_cast<double>(count_);
}

void Metric::Reset() {
  sum_ = 0;
  count_ = 0;
}

void Metric::Add(double sum, int64_t count) {
  sum_ += sum;
  count_ += count;
}

namespace {

// The array's values on the host, as doubles (waits for the ops that write it).
std::vector<double> HostValues(const NDArray& array, const std::string& metric, const char* what) {
  WEFT_CHECK(!array.is_none()) << metric << ": the " << what << " array is null";
  std::vector<double> values;
  WEFT_DTYPE_SWITCH(array.dtype(), T, metric + ": " + what, {
    const std::vector<T> typed = array.ToVector<T>();
    values.assign(typed.begin(), typed.end());
  });
  return values;
}

// Labels as class indices: each must be an integer in [0, num_classes), or (num_classes 0: the
// count is not known) a non-negative integer.
std::vector<int64_t> ClassIndices(const std::vector<double>& labels, int64_t num_classes,
                                  const std::string& metric) {
  std::vector<int64_t> classes(labels.size());
  for (size_t i = 0; i < labels.size(); ++i) {
    const double label = labels[i];
    const bool in_range =
        label >= 0 && (num_classes == 0 || label < static_cast<double>(num_classes));
    if (label != std::floor(label) || !in_range) {  // NaN fails both
      WEFT_THROW(metric << ": label " << i << ": expected "
                        << (num_classes > 0
                                ? "a class index in [0, " + std::to_string(num_classes) + ")"
                                : std::string("a non-negative class index"))
                        << ", found " << label);
    }
    classes[i] = static_cast<int64_t>(label);
  }
  return classes;
}

// The index of the largest entry of each row of scores (n, c); the first one on ties.
std::vector<int64_t> ArgmaxRows(const std::vector<double>& scores, int64_t n, int64_t c) {
  std::vector<int64_t> best(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 1; j < c; ++j) {
      if (scores[i * c + j] > scores[i * c + best[i]]) best[i] = j;
    }
  }
  return best;
}

bool IsScoresFor(const NDArray& predictions, int64_t n) {
  return predictions.shape().ndim() == 2 && predictions.shape()[0] == n &&
         predictions.shape()[1] > 0;
}

}  // namespace

// labels (N,); predictions (N, C) scores, or classes shaped like the labels.
void Accuracy::Update(const NDArray& labels, const NDArray& predictions) {
  const std::vector<double> label_values = HostValues(labels, name(), "labels");
  const auto n = static_cast<int64_t>(label_values.size());
  const std::vector<double> values = HostValues(predictions, name(), "predictions");
  std::vector<int64_t> truth, predicted;
  if (predictions.shape() == labels.shape()) {
    truth = ClassIndices(label_values, 0, name());
    predicted = ClassIndices(values, 0, name() + " (predicted classes)");
  } else if (IsScoresFor(predictions, n)) {
    truth = ClassIndices(label_values, predictions.shape()[1], name());
    predicted = ArgmaxRows(values, n, predictions.shape()[1]);
  } else {
    WEFT_THROW(name() << ": expected predictions (" << n << ", C) or shaped like the labels "
                      << labels.shape() << ", found " << predictions.shape());
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) correct += predicted[i] == truth[i];
  Add(static_cast<double>(correct), n);
}

// labels (N,); predictions (N, C) probabilities.
void CrossEntropy::Update(const NDArray& labels, const NDArray& predictions) {
  const std::vector<double> label_values = HostValues(labels, name(), "labels");
  const std::vector<double> p = HostValues(predictions, name(), "predictions");
  const auto n = static_cast<int64_t>(label_values.size());
  if (!IsScoresFor(predictions, n)) {
    WEFT_THROW(name() << ": expected probabilities (" << n << ", C) for " << n << " labels, found "
                      << predictions.shape());
  }
  const int64_t c = predictions.shape()[1];
  const std::vector<int64_t> classes = ClassIndices(label_values, c, name());
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum -= std::log(p[i * c + classes[i]] + eps_);
  Add(sum, n);
}

}  // namespace weft
