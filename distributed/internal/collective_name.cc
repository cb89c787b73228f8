#include "distributed/internal/collective_name.h"

#include <sstream>

namespace weft::dist::internal {

std::string CollectiveName::ToString() const {
  std::ostringstream s;
  switch (kind) {
    case Kind::kAllReduce:
      s << "all-reduce (" << (op == ReduceOp::kAverage ? "average" : "sum") << " of " << elements
        << " " << DTypeName(dtype) << " in " << arrays << (arrays == 1 ? " array" : " arrays");
      break;
    case Kind::kBroadcast:
      s << "broadcast (" << bytes << " bytes from rank " << root;
      break;
    case Kind::kAllGather:
      s << "all-gather (" << bytes << " bytes per rank";
      break;
  }
  if (gpu >= 0) s << " on gpu:" << gpu << ", nccl";
  s << ")";
  return s.str();
}

}  // namespace weft::dist::internal
