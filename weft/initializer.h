// Initializers: fill a model's parameters before training. An initializer owns only its settings;
// the fills are pushed to the engine like any op and draw from weft's global random stream, so
// the same weft::SeedRandom seed and the same calls in the same order give the same values.
//
//   SeedRandom(7);
//   Xavier init(Xavier::RandType::kGaussian, Xavier::FactorType::kIn, 2);
//   init.Initialize("fc1_weight", w);   // Xavier draws
//   init.Initialize("fc1_bias", b);     // zeros
//
// The naming convention (MXNet's): a parameter named "<prefix>_weight" (or "weight") gets the
// initializer's own fill; "_bias", "_beta" and "_moving_mean" get zeros; "_gamma" and
// "_moving_var" get ones. Initializers are an interface so that users can add their own.
#pragma once

#include <string>

#include "storage/ndarray.h"

namespace weft {

class Initializer {
 public:
  virtual ~Initializer() = default;
  // Fills `array` according to the suffix of `name` (see above). Throws weft::Error, naming the
  // parameter, for a name with none of the suffixes or an array the fill cannot apply to.
  void Initialize(const std::string& name, const NDArray& array) const;
  // The initializer's own fill for a weight; `name` is for messages.
  virtual void InitWeight(const std::string& name, const NDArray& weight) const = 0;
};

// Uniform in [-scale, scale). float32 or float64 weights.
class Uniform : public Initializer {
 public:
  explicit Uniform(double scale = 0.07);
  void InitWeight(const std::string& name, const NDArray& weight) const override;

 private:
  double scale_;
};

// Normal with mean 0 and standard deviation sigma. float32 or float64 weights.
class Normal : public Initializer {
 public:
  explicit Normal(double sigma = 0.01);
  void InitWeight(const std::string& name, const NDArray& weight) const override;

 private:
  double sigma_;
};

// Every element `value` (any dtype).
class Constant : public Initializer {
 public:
  explicit Constant(double value) : value_(value) {}
  void InitWeight(const std::string& name, const NDArray& weight) const override;

 private:
  double value_;
};

class Zero : public Constant {
 public:
  Zero() : Constant(0) {}
};

// Glorot and Bengio's initialization, as MXNet defines it, for weights of at least two axes
// (out, in, kernel...): with fan_in = shape[1] * prod(shape[2:]) and fan_out = shape[0] *
// prod(shape[2:]), scale = sqrt(magnitude / factor) where factor is their mean (kAvg), fan_in or
// fan_out; then uniform in [-scale, scale) or normal with standard deviation scale.
class Xavier : public Initializer {
 public:
  enum class RandType { kUniform, kGaussian };
  enum class FactorType { kAvg, kIn, kOut };

  explicit Xavier(RandType rnd_type = RandType::kUniform, FactorType factor_type = FactorType::kAvg,
                  double magnitude = 3);
  void InitWeight(const std::string& name, const NDArray& weight) const override;
  // The scale for a weight of `shape`; throws weft::Error when it has fewer than two axes.
  double Scale(const Shape& shape) const;

 private:
  RandType rnd_type_;
  FactorType factor_type_;
  double magnitude_;
};

}  // namespace weft
