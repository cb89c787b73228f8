#include "ops/gpu/fusion/codegen.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "ops/gpu/fusion/kernel_parts.h"
#include "ops/gpu/fusion/step_code.h"

namespace weft::gpu {
namespace {

std::string Num(uint64_t i) { return std::to_string(i); }

// One source, appended to os_ in order: the argument struct, a function per broadcast walk's
// offset, ElementsL for each lane count L (the pack width and, for the tail, 1), with its parts
// when there are several, and the kernel.
//
// ElementsL(a, i) computes positions [i, i + L): every operand is an array of L in registers, its
// lanes written out one statement each (no loops: unrolling thousands of loops costs NVVM more
// than the statements). The full-size inputs are loaded as packs and the broadcast reads done
// first (before any store, so an output may share memory with an input), then each live step in
// order, each output stored as a pack right after the step that computes it (values die early).
class Generator {
 public:
  Generator(const FusedGroup& g, const KernelPlan& plan, const CodegenOptions& o)
      : g_(g), plan_(plan), o_(o), code_(g, plan) {}

  std::string Run() {
    if (o_.bad_code) os_ << "#error WEFT_FUSION_TEST_BAD_CODE\n";
    Prelude();
    for (size_t w = 0; w < plan_.walks.size(); ++w) Offset(w);
    parts_ = SplitIntoParts(g_, plan_, code_, o_.part_size);
    for (int lanes : Lanes()) {
      for (size_t p = 0; p < parts_.size() && parts_.size() > 1; ++p) Part(p, lanes);
      Elements(lanes);
    }
    Entry();
    os_ << "}\n}\n";
    return os_.str();
  }

 private:
  std::vector<int> Lanes() const {
    return o_.width > 1 ? std::vector<int>{o_.width, 1} : std::vector<int>{1};
  }
  bool Full(uint32_t input) const {
    return plan_.loaded[input] && plan_.input_kinds[input] == FusedGroup::InputKind::kFull;
  }
  void Declare(const Operand& o, int lanes) {
    os_ << "  " << code_.TypeOf(o) << " " << o.Name() << "[" << lanes << "];\n";
  }
  void Prelude();
  std::string FieldType(const ArgField& f) const;
  void Offset(size_t w);
  void Elements(int lanes);
  void Part(size_t p, int lanes);
  void Steps(const std::vector<uint32_t>& steps, int lanes, const std::vector<Operand>& declared);
  void Stores(uint32_t s, int lanes);
  void Entry();

  const FusedGroup& g_;
  const KernelPlan& plan_;
  const CodegenOptions& o_;
  const StepCode code_;
  std::vector<KernelPart> parts_;
  std::ostringstream os_;
};

std::string Generator::FieldType(const ArgField& f) const {
  switch (f.kind) {
    case ArgField::Kind::kInput:
      return "const " + StoreTypeName(g_.dtypes[f.index]) + "*";
    case ArgField::Kind::kOutput:
      return StoreTypeName(g_.dtypes[g_.outputs[f.index]]) + "*";
    case ArgField::Kind::kScalar:
      return "double";
    default:
      return "I";
  }
}

void Generator::Prelude() {
  os_ << "#include \"fused.cuh\"\nnamespace weft {\nnamespace fused {\n";
  os_ << "typedef " << (plan_.index64 ? "long long" : "int") << " I;\n";
  os_ << "struct Args {\n";
  for (const ArgField& f : plan_.fields) os_ << "  " << FieldType(f) << " " << f.name << ";\n";
  os_ << "};\n";
  os_ << "static_assert(sizeof(Args) == " << plan_.bytes << ", \"the host's layout of Args\");\n";
}

// I OffsetK(a, r): where walk K reads its input at position r of its frame, summed from the
// innermost axis out (BroadcastWalk says which extents and strides it reads).
void Generator::Offset(size_t w) {
  const BroadcastWalk& walk = plan_.walks[w];
  const std::string k = "w" + Num(w);
  const int outermost = walk.OutermostMoving();
  if (outermost == walk.ndim) {
    os_ << "__device__ __forceinline__ I Offset" << w << "(const Args&, I) { return 0; }\n";
    return;
  }
  os_ << "__device__ __forceinline__ I Offset" << w << "(const Args& a, I r) {\n  I o = 0;\n";
  for (int d = walk.ndim - 1; d >= outermost; --d) {
    const std::string times = walk.ReadsStride(d) ? " * a." + k + "s" + Num(d) : "";
    if (d == 0) {
      os_ << "  o += r" << times << ";\n";
      continue;
    }
    const std::string extent = "a." + k + "d" + Num(d);
    if (walk.stride[d] != 0) os_ << "  o += (r % " << extent << ")" << times << ";\n";
    if (d > outermost) os_ << "  r /= " << extent << ";\n";
  }
  os_ << "  return o;\n}\n";
}

void Generator::Elements(int lanes) {
  os_ << "__device__ __forceinline__ void Elements" << lanes << "(const Args& a, I i) {\n";
  for (uint32_t in = 0; in < g_.num_inputs; ++in) {
    if (!Full(in)) continue;
    const Operand v{Operand::Kind::kValue, in};
    Declare(v, lanes);
    os_ << "  LoadN<" << lanes << ">(a.in" << in << " + i, " << v.Name() << ");\n";
  }
  for (uint32_t w = 0; w < plan_.walks.size(); ++w) {
    Declare({Operand::Kind::kWalk, w}, lanes);
    for (int j = 0; j < lanes; ++j) {
      os_ << "  b" << w << "[" << j << "] = ToArith(a.in" << plan_.walks[w].input << "[Offset" << w
          << "(a, i + " << j << ")]);\n";
    }
  }
  if (parts_.size() == 1) Steps(parts_[0].steps, lanes, {});
  for (size_t p = 0; p < parts_.size() && parts_.size() > 1; ++p) {
    for (const Operand& o : parts_[p].outs) Declare(o, lanes);
    os_ << "  Part" << p << "_" << lanes << "(a, i";
    for (const Operand& o : parts_[p].ins) os_ << ", " << o.Name();
    for (const Operand& o : parts_[p].outs) os_ << ", " << o.Name();
    os_ << ");\n";
  }
  os_ << "}\n";
}

// PartP_L(a, i, ins..., outs...): the steps of part P, a function the compiler optimizes alone.
void Generator::Part(size_t p, int lanes) {
  const KernelPart& part = parts_[p];
  os_ << "__device__ __noinline__ void Part" << p << "_" << lanes << "(const Args& a, I i";
  for (const Operand& o : part.ins)
    os_ << ", const " << code_.TypeOf(o) << " (&" << o.Name() << ")[" << lanes << "]";
  for (const Operand& o : part.outs)
    os_ << ", " << code_.TypeOf(o) << " (&" << o.Name() << ")[" << lanes << "]";
  os_ << ") {\n";
  Steps(part.steps, lanes, part.outs);
  os_ << "}\n";
}

// The steps' arrays (but those in `declared`), their lanes, and their stores.
void Generator::Steps(const std::vector<uint32_t>& steps, int lanes,
                      const std::vector<Operand>& declared) {
  for (uint32_t s : steps) {
    for (const Operand& o : code_.Defines(s)) {
      if (std::find(declared.begin(), declared.end(), o) == declared.end()) Declare(o, lanes);
    }
    for (int j = 0; j < lanes; ++j) os_ << code_.Statements(s, j);
    Stores(s, lanes);
  }
}

void Generator::Stores(uint32_t s, int lanes) {
  for (const StepCode::Store& st : code_.Stores(s)) {
    const std::string out = "a.out" + Num(st.output) + " + i";
    if (st.cast_adds) {
      os_ << "  double c" << st.output << "[" << lanes << "];\n";
      for (int j = 0; j < lanes; ++j) {
        os_ << "  c" << st.output << "[" << j << "] = static_cast<double>(" << st.from.Name() << "["
            << j << "]);\n";
      }
      os_ << "  StoreCastAddN<" << lanes << ">(" << out << ", c" << st.output << ");\n";
      continue;
    }
    const char* req = plan_.out_req[st.output] == OpReq::kAddTo ? "kReqAdd" : "kReqWrite";
    os_ << "  StoreN<" << lanes << ">(" << out << ", " << st.from.Name() << ", " << req << ");\n";
  }
}

void Generator::Entry() {
  os_ << "__global__ void __launch_bounds__(kGpuBlock) Kernel(";
  if (o_.table) {
    os_ << "const Args* table) {\n  const Args& a = *table;\n";
  } else {
    os_ << (o_.arch >= 70 ? "const __grid_constant__ Args a" : "const Args a") << ") {\n";
  }
  if (o_.width == 1) {
    os_ << "  ForEachPackOf<1>(a.n, [&](I i, auto) { Elements1(a, i); });\n}\n";
    return;
  }
  os_ << "  ForEachPackOf<" << o_.width << ">(a.n, [&](I i, auto w) {\n"
      << "    if constexpr (decltype(w)::value == 1) {\n      Elements1(a, i);\n    } else {\n     "
         " Elements"
      << o_.width << "(a, i);\n    }\n  });\n}\n";
}

}  // namespace

std::optional<std::string> GenerateFusedSource(const FusedGroup& group, const KernelPlan& plan,
                                               const CodegenOptions& options, std::string* error) {
  try {
    return Generator(group, plan, options).Run();
  } catch (const Unsupported& e) {
    *error = e.what();
    return std::nullopt;
  }
}

}  // namespace weft::gpu
