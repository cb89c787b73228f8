#include "ops/gpu/fusion/step_code.h"

#include <algorithm>

namespace weft::gpu {

std::string ArithTypeName(DType t) {
  if (t == DType::kFloat32 || Is16BitFloat(t)) return "float";
  if (t == DType::kFloat64) return "double";
  throw Unsupported("no fused code for " + std::string(DTypeName(t)));
}

std::string StoreTypeName(DType t) {
  if (t == DType::kBFloat16) return "bf16";
  if (t == DType::kFloat16) return "f16";
  return ArithTypeName(t);  // "float" or "double", or throws
}

StepCode::StepCode(const FusedGroup& group, const KernelPlan& plan)
    : g_(group), plan_(plan), producer_(group.Producers()), output_of_(group.OutputIndex()) {}

Operand StepCode::Arg(uint32_t step, size_t arg) const {
  const int walk = plan_.walk_of[step][arg];
  return walk >= 0 ? Operand{Operand::Kind::kWalk, static_cast<uint32_t>(walk)}
                   : Holder(g_.steps[step].args[arg]);
}

Operand StepCode::Holder(uint32_t value) const {
  for (int p = producer_[value];
       p >= 0 && g_.steps[p].op->pointwise.kind == PointwiseKind::kReshape; p = producer_[value]) {
    value = g_.steps[p].args[0];
  }
  return Operand{Operand::Kind::kValue, value};
}

std::string StepCode::TypeOf(const Operand& o) const {
  return ArithTypeName(g_.dtypes[o.kind == Operand::Kind::kValue ? o.id : plan_.walks[o.id].input]);
}

std::vector<Operand> StepCode::Defines(uint32_t step) const {
  const FusedGroup::Step& s = g_.steps[step];
  std::vector<Operand> defined;
  if (s.op->pointwise.kind == PointwiseKind::kReshape) return defined;
  for (uint32_t o = 0; o < s.num_outputs; ++o)
    defined.push_back({Operand::Kind::kValue, s.first_output + o});
  return defined;
}

std::vector<Operand> StepCode::Reads(uint32_t step) const {
  const FusedGroup::Step& s = g_.steps[step];
  std::vector<Operand> read;
  for (size_t a = 0; a < s.args.size(); ++a) {
    if (ReadsAsData(s.op->pointwise.kind, a)) read.push_back(Arg(step, a));
  }
  return read;
}

std::vector<StepCode::Store> StepCode::Stores(uint32_t step) const {
  const FusedGroup::Step& s = g_.steps[step];
  std::vector<Store> stores;
  for (uint32_t v = s.first_output; v < s.first_output + s.num_outputs; ++v) {
    const int k = output_of_[v];
    if (k < 0 || plan_.out_req[k] == OpReq::kNull) continue;
    const bool cast_adds =
        plan_.out_req[k] == OpReq::kAddTo && s.op->pointwise.kind == PointwiseKind::kCast;
    stores.push_back({static_cast<uint32_t>(k), cast_adds ? Arg(step, 0) : Holder(v), cast_adds});
  }
  return stores;
}

std::string StepCode::Statements(uint32_t step, int lane) const {
  std::string code;
  for (const Operand& out : Defines(step)) {
    code += "  " + At(out, lane) + " = " +
            Expression(step, out.id - g_.steps[step].first_output, lane) + ";\n";
  }
  return code;
}

// Output `output` of the step at one lane, as the step's unfused kernel computes it.
std::string StepCode::Expression(uint32_t step, uint32_t output, int lane) const {
  const FusedGroup::Step& s = g_.steps[step];
  const PointwiseFn& pw = s.op->pointwise;
  const std::string a = ArithTypeName(g_.dtypes[s.first_output]), f = pw.Functor(s.attrs);
  const auto r = [&](size_t arg) { return At(Arg(step, arg), lane); };
  // The scalars the functor takes (one, 0, for functors that take none).
  std::string scalars;
  for (int k = 0, taken = ScalarsTaken(s); k < std::max(taken, 1); ++k) {
    scalars +=
        ", " + (k < taken ? "static_cast<" + a + ">(a." + ScalarField(step, k) + ")" : a + "(0)");
  }
  const bool functor =
      pw.kind == PointwiseKind::kUnary || pw.kind == PointwiseKind::kUnaryBackward ||
      pw.kind == PointwiseKind::kBinary || pw.kind == PointwiseKind::kBinaryBackward ||
      pw.kind == PointwiseKind::kTernary;
  if (functor && f.empty()) throw Unsupported("step '" + s.name + "' names no functor");
  switch (pw.kind) {
    case PointwiseKind::kUnary:
      return f + "::Fwd<" + a + ">(" + r(0) + scalars + ")";
    case PointwiseKind::kUnaryBackward:
      return "weft::fn::BackwardOf<" + f + ", " + a + ">(" + r(0) + ", " + r(s.args.size() - 1) +
             scalars + ")";
    case PointwiseKind::kBinary:
      return f + "::Fwd<" + a + ">(" + r(0) + ", " + r(1) + ")";
    case PointwiseKind::kTernary:
      return f + "::Fwd<" + a + ">(" + r(0) + ", " + r(1) + ", " + r(2) + ")";
    case PointwiseKind::kBinaryBackward:
      return r(0) + " * " + f + (output == 0 ? "::DL<" : "::DR<") + a + ">(" + r(1) + ", " + r(2) +
             ")";
    case PointwiseKind::kAddN: {
      std::string sum = "static_cast<" + a + ">(-0.0)";  // from -0, in input order, as add_n sums
      for (size_t k = 0; k < s.args.size(); ++k) sum = "(" + sum + " + " + r(k) + ")";
      return sum;
    }
    case PointwiseKind::kCast:
      return "ToArith(CastStore<" + StoreTypeName(g_.dtypes[s.first_output]) +
             ">(static_cast<double>(" + r(0) + ")))";
    default:
      throw Unsupported("no fused code for step '" + s.name + "' (op " + s.op->name + ")");
  }
}

}  // namespace weft::gpu
