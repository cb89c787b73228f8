// Graphs the pointwise fusion tests share (tests/ops_fusion_test.cc, gpu_fusion_test.cc,
// cuda_fusion_codegen_test.cc): symbol shorthands, the benchmark's 8-op chain and the seed's
// XLNet pattern, and the fused groups of a graph.
//
//   Symbol y = Chain(Var("x"));                       // sigmoid(relu(x * 1.5 + 0.25) * 0.75 - 0.5)
//   * 2 - 1 for (auto& g : FusedGroupsOf(FusePointwise(typed))) ...
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "graph/symbol.h"
#include "ops/fusion/fused_group.h"

namespace weft::testing {

Symbol Var(const std::string& name);
Symbol Op1(const std::string& op, const Symbol& x, AttrMap attrs = {});
Symbol Op2(const std::string& op, const Symbol& a, const Symbol& b);
Symbol Scalar(const std::string& op, const Symbol& x, double s);  // a *_scalar op

// sigmoid(relu(x * a + 0.25) * 0.75 - 0.5) * 2 - 1, with a = first_scalar: the benchmark's chain.
Symbol Chain(const Symbol& x, double first_scalar = 1.5);

// The seed (apache/mxnet#19316): relu(x) reshaped 12 times to (16, 8, 4), each reshape followed
// by 12 expand_dims: with CSE off, one group of 144 outputs (x: 512 elements).
Symbol XLNetPattern(const Symbol& x);

// The group of every _fused_pointwise node of `g`, in node order.
std::vector<std::shared_ptr<const FusedGroup>> FusedGroupsOf(const Graph& g);

}  // namespace weft::testing
