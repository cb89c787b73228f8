#include "ops/fusion/fused_group.h"

#include "core/error.h"

namespace weft {

// Meta when no step reads it as data: only as a later input of a cast or reshape step. One pass
// over every step's arguments.
std::vector<FusedGroup::InputKind> FusedGroup::InputKinds() const {
  std::vector<bool> data(num_inputs, false);
  for (const Step& s : steps) {
    for (size_t a = 0; a < s.args.size(); ++a) {
      if (s.args[a] < num_inputs && ReadsAsData(s.op->pointwise.kind, a)) data[s.args[a]] = true;
    }
  }
  std::vector<InputKind> kinds;
  for (uint32_t i = 0; i < num_inputs; ++i) {
    kinds.push_back(!data[i]                   ? InputKind::kMeta
                    : shapes[i].Size() == size ? InputKind::kFull
                                               : InputKind::kBroadcast);
  }
  return kinds;
}

FusedGroup::InputKind FusedGroup::input_kind(uint32_t input) const { return InputKinds()[input]; }

std::vector<int> FusedGroup::Producers() const {
  std::vector<int> producer(num_values(), -1);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (uint32_t o = 0; o < steps[s].num_outputs; ++o)
      producer[steps[s].first_output + o] = static_cast<int>(s);
  }
  return producer;
}

std::vector<int> FusedGroup::OutputIndex() const {
  std::vector<int> index(num_values(), -1);
  for (size_t k = 0; k < outputs.size(); ++k) index[outputs[k]] = static_cast<int>(k);
  return index;
}

namespace {

bool AnyOutputLive(const FusedGroup::Step& step, const std::vector<bool>& live_values) {
  for (uint32_t o = 0; o < step.num_outputs; ++o) {
    if (live_values[step.first_output + o]) return true;
  }
  return false;
}

}  // namespace

// Backwards from the stored outputs: a step's data arguments are needed once the step is live.
std::vector<bool> FusedGroup::LiveValues(std::span<const OpReq> req) const {
  WEFT_CHECK_EQ(req.size(), outputs.size()) << label << ": output requests";
  std::vector<bool> live(num_values(), false);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (req[k] != OpReq::kNull) live[outputs[k]] = true;
  }
  for (size_t s = steps.size(); s-- > 0;) {
    if (!AnyOutputLive(steps[s], live)) continue;
    for (size_t a = 0; a < steps[s].args.size(); ++a) {
      if (ReadsAsData(steps[s].op->pointwise.kind, a)) live[steps[s].args[a]] = true;
    }
  }
  return live;
}

std::vector<bool> FusedGroup::LiveSteps(std::span<const OpReq> req) const {
  const std::vector<bool> live_values = LiveValues(req);
  std::vector<bool> live(steps.size());
  for (size_t s = 0; s < steps.size(); ++s) live[s] = AnyOutputLive(steps[s], live_values);
  return live;
}

void FusedGroup::Check() const {
  uint32_t next = num_inputs;
  for (const Step& s : steps) {
    WEFT_CHECK(s.op != nullptr && s.op->pointwise)
        << label << ": step '" << s.name << "' is not a pointwise op";
    WEFT_CHECK_EQ(s.first_output, next)
        << label << ": step '" << s.name << "' outputs out of order";
    for (uint32_t a : s.args) {
      WEFT_CHECK(a < s.first_output)
          << label << ": step '" << s.name << "' reads value " << a << " before it exists";
    }
    for (uint32_t o = 0; o < s.num_outputs; ++o) {
      WEFT_CHECK_EQ(shapes[next + o].Size(), size)
          << label << ": step '" << s.name << "' output " << o;
    }
    next += s.num_outputs;
  }
  WEFT_CHECK_EQ(next, num_values()) << label << ": values";
  const std::vector<InputKind> kinds = InputKinds();
  for (const Step& s : steps) {
    for (uint32_t a : s.args) {
      WEFT_CHECK(a >= num_inputs || kinds[a] != InputKind::kBroadcast ||
                 s.op->pointwise.kind == PointwiseKind::kBinary)
          << label << ": broadcast input " << a << " read by '" << s.name << "'";
    }
  }
  for (uint32_t v : outputs)
    WEFT_CHECK(v >= num_inputs && v < num_values()) << label << ": output value " << v;
}

Attrs FusedAttrs(std::shared_ptr<const FusedGroup> group) {
  static const std::string* name = &GetOp("_fused_pointwise").name;
  return Attrs({}, ParsedParams::Of(FusedParam{std::move(group)}), name);
}

}  // namespace weft
