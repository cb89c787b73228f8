#include "tests/fusion_test_util.h"

namespace weft::testing {

Symbol Var(const std::string& name) { return Symbol::Variable(name); }
Symbol Op1(const std::string& op, const Symbol& x, AttrMap attrs) {
  return Symbol::Op(op, {x}, attrs);
}
Symbol Op2(const std::string& op, const Symbol& a, const Symbol& b) {
  return Symbol::Op(op, {a, b});
}
Symbol Scalar(const std::string& op, const Symbol& x, double s) {
  return Symbol::Op(op, {x}, {{"scalar", std::to_string(s)}});
}

Symbol Chain(const Symbol& x, double first_scalar) {
  Symbol y = Scalar("add_scalar", Scalar("mul_scalar", x, first_scalar), 0.25);
  y = Scalar("sub_scalar", Scalar("mul_scalar", Op1("relu", y), 0.75), 0.5);
  return Scalar("add_scalar", Scalar("mul_scalar", Op1("sigmoid", y), 2.0), -1.0);
}

Symbol XLNetPattern(const Symbol& x) {
  const Symbol h = Op1("relu", x);  // the input, computed inside the group
  std::vector<Symbol> outs;
  for (int r = 0; r < 12; ++r) {
    Symbol reshaped = Op1("reshape", h, {{"shape", "(16, 8, 4)"}});
    for (int e = 0; e < 12; ++e)
      outs.push_back(Op1("expand_dims", reshaped, {{"axis", std::to_string(e % 4)}}));
  }
  return Symbol::Group(outs);
}

std::vector<std::shared_ptr<const FusedGroup>> FusedGroupsOf(const Graph& g) {
  std::vector<std::shared_ptr<const FusedGroup>> groups;
  for (const Node& n : g.nodes()) {
    if (!n.is_variable() && n.op->name == "_fused_pointwise")
      groups.push_back(n.attrs.Get<FusedParam>().group);
  }
  return groups;
}

}  // namespace weft::testing
