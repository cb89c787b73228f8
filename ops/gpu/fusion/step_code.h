// The code of the steps of a fused group (ops/fusion/fused_group.h), one position at a time, for
// the kernel generator (codegen.h): what each argument reads (an operand), and the statement each
// step's kind gives with its functor, exactly as the unfused GPU kernels call it
// (kernels/unary.cuh, binary.cuh, where.cuh, cast.cuh): kUnary F::Fwd(x, s) (or F::Fwd(x, s, t):
// the scalars the functor takes); kUnaryBackward BackwardOf<F>(dy, x or y, s[, t]); kBinary
// F::Fwd(l, r); kBinaryBackward dy * F::DL(l, r) and dy * F::DR(l, r); kTernary F::Fwd(c, a, b);
// kAddN a sum from -0 in input order; kCast a conversion through double (bfloat16 rounded to
// nearest even); kReshape nothing (its output is its argument's registers).
//
// Operands are arrays of the kernel's pack width in registers: v<value> for values (a reshape's
// output is the array of the value it reshapes), b<walk> for what a broadcast walk reads.
//
//   StepCode code(group, plan);
//   os << code.Statements(s, /*lane=*/2);   // "  v7[2] = weft::fn::Relu::Fwd<float>(v5[2],
//   float(0));\n"
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "ops/fusion/fused_group.h"
#include "ops/gpu/fusion/kernel_plan.h"

namespace weft::gpu {

// What the generator has no code for (a dtype, a kind); GenerateFusedSource returns its message.
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The arithmetic type of a stored dtype as kernels/common.cuh has it ("float" for float32 and
// bfloat16, "double"), and the stored type ("float", "double", "bf16"). Throw Unsupported for
// others.
std::string ArithTypeName(DType t);
std::string StoreTypeName(DType t);

struct Operand {
  enum class Kind : uint8_t { kValue, kWalk };
  Kind kind;
  uint32_t id;
  std::string Name() const { return (kind == Kind::kValue ? "v" : "b") + std::to_string(id); }
  bool operator==(const Operand& o) const { return kind == o.kind && id == o.id; }
};

class StepCode {
 public:
  StepCode(const FusedGroup& group, const KernelPlan& plan);

  // What argument `arg` of step `step` reads (data arguments only).
  Operand Arg(uint32_t step, size_t arg) const;
  // The operand holding value v: its own array, or for a reshape's output the value it reshapes.
  Operand Holder(uint32_t value) const;
  std::string TypeOf(const Operand& o) const;  // its arithmetic type

  // The operands step `step` defines (none for a reshape) and those it reads (data arguments).
  std::vector<Operand> Defines(uint32_t step) const;
  std::vector<Operand> Reads(uint32_t step) const;

  // The statements that compute the step's outputs at lane `lane` of their arrays.
  std::string Statements(uint32_t step, int lane) const;

  // The outputs of the fused node that step `step` computes and stores (request not kNull): from
  // the operand holding the value, or, for a cast whose output adds, from the cast's argument (the
  // sum is done in double, as the unfused Cast adds: StoreCastAddN).
  struct Store {
    uint32_t output;
    Operand from;
    bool cast_adds;
  };
  std::vector<Store> Stores(uint32_t step) const;

 private:
  std::string At(const Operand& o, int lane) const {
    return o.Name() + "[" + std::to_string(lane) + "]";
  }
  std::string Expression(uint32_t step, uint32_t output, int lane) const;

  const FusedGroup& g_;
  const KernelPlan& plan_;
  std::vector<int> producer_;   // per value
  std::vector<int> output_of_;  // per value: its index among the outputs, or -1
};

}  // namespace weft::gpu
