#include "weft/initializer.h"

#include <array>
#include <cmath>
#include <string_view>

#include "core/error.h"

namespace weft {
namespace {

// What a parameter gets, by the suffix of its name.
enum class Fill { kInitializer, kZeros, kOnes };

struct SuffixRule {
  std::string_view suffix;
  Fill fill;
};

constexpr std::array<SuffixRule, 6> kSuffixRules = {{
    {"weight", Fill::kInitializer},
    {"bias", Fill::kZeros},
    {"beta", Fill::kZeros},
    {"moving_mean", Fill::kZeros},
    {"gamma", Fill::kOnes},
    {"moving_var", Fill::kOnes},
}};

// True when `name` is `suffix` or ends in "_" + suffix.
bool HasSuffix(std::string_view name, std::string_view suffix) {
  if (name == suffix) return true;
  return name.size() > suffix.size() && name.ends_with(suffix) &&
         name[name.size() - suffix.size() - 1] == '_';
}

// The random fills (FillUniform, FillNormal) compute in float32 or float64 only.
void CheckRandomFillable(const char* initializer, const std::string& name, const NDArray& weight) {
  WEFT_CHECK(!weight.is_none()) << initializer << ": parameter '" << name << "' is a null array";
  if (weight.dtype() != DType::kFloat32 && weight.dtype() != DType::kFloat64) {
    WEFT_THROW(initializer << ": parameter '" << name << "': expected float32 or float64, found "
                           << weight.dtype());
  }
}

}  // namespace

void Initializer::Initialize(const std::string& name, const NDArray& array) const {
  WEFT_CHECK(!array.is_none()) << "Initialize: parameter '" << name << "' is a null array";
  for (const SuffixRule& rule : kSuffixRules) {
    if (!HasSuffix(name, rule.suffix)) continue;
    switch (rule.fill) {
      case Fill::kInitializer:
        return InitWeight(name, array);
      case Fill::kZeros:
        return array.Fill(0);
      case Fill::kOnes:
        return array.Fill(1);
    }
  }
  WEFT_THROW("Initialize: parameter '"
             << name
             << "': expected a name ending in _weight, _bias, _gamma, _beta, _moving_mean "
                "or _moving_var, to choose its initialization");
}

Uniform::Uniform(double scale) : scale_(scale) {
  WEFT_CHECK(scale > 0) << "Uniform: expected a scale > 0, found " << scale;
}

void Uniform::InitWeight(const std::string& name, const NDArray& weight) const {
  CheckRandomFillable("Uniform", name, weight);
  weight.FillUniform(-scale_, scale_);
}

Normal::Normal(double sigma) : sigma_(sigma) {
  WEFT_CHECK(sigma >= 0) << "Normal: expected a sigma >= 0, found " << sigma;
}

void Normal::InitWeight(const std::string& name, const NDArray& weight) const {
  CheckRandomFillable("Normal", name, weight);
  weight.FillNormal(0, sigma_);
}

void Constant::InitWeight(const std::string& name, const NDArray& weight) const {
  WEFT_CHECK(!weight.is_none()) << "Constant: parameter '" << name << "' is a null array";
  weight.Fill(value_);
}

Xavier::Xavier(RandType rnd_type, FactorType factor_type, double magnitude)
    : rnd_type_(rnd_type), factor_type_(factor_type), magnitude_(magnitude) {
  WEFT_CHECK(magnitude > 0) << "Xavier: expected a magnitude > 0, found " << magnitude;
}

double Xavier::Scale(const Shape& shape) const {
  if (shape.ndim() < 2) {
    WEFT_THROW("Xavier: expected a weight of at least 2 axes (out, in, ...), found shape "
               << shape);
  }
  double receptive_field = 1;  // prod(shape[2:])
  for (int axis = 2; axis < shape.ndim(); ++axis)
    receptive_field *= static_cast<double>(shape[axis]);
  const double fan_in = static_cast<double>(shape[1]) * receptive_field;
  const double fan_out = static_cast<double>(shape[0]) * receptive_field;
  double factor = (fan_in + fan_out) / 2;
  if (factor_type_ == FactorType::kIn) factor = fan_in;
  if (factor_type_ == FactorType::kOut) factor = fan_out;
  return std::sqrt(magnitude_ / factor);
}

void Xavier::InitWeight(const std::string& name, const NDArray& weight) const {
  CheckRandomFillable("Xavier", name, weight);
  if (weight.shape().ndim() < 2) {
    WEFT_THROW("Xavier: parameter '"
               << name << "': expected a weight of at least 2 axes (out, in, ...), found shape "
               << weight.shape());
  }
  if (weight.size() == 0) return;  // nothing to fill, and a fan of 0 has no scale
  const double scale = Scale(weight.shape());
  if (rnd_type_ == RandType::kUniform) {
    weight.FillUniform(-scale, scale);
  } else {
    weight.FillNormal(0, scale);
  }
}

}  // namespace weft
