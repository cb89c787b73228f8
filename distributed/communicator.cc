#include "distributed/communicator.h"

#include <cmath>
#include <sstream>

#include "core/env.h"
#include "core/error.h"

namespace weft::dist {

CommOptions CommOptions::FromEnv() {
  CommOptions options;
  const std::string timeout = GetEnvString("WEFT_DIST_TIMEOUT", "");
  if (!timeout.empty()) {
    char* end = nullptr;
    options.timeout_seconds = std::strtod(timeout.c_str(), &end);
    WEFT_CHECK(*end == '\0' && options.timeout_seconds > 0 &&
               std::isfinite(options.timeout_seconds))
        << "WEFT_DIST_TIMEOUT: expected a number of seconds > 0, found '" << timeout << "'";
  }
  options.abort_on_timeout = GetEnvBool("WEFT_DIST_ABORT_ON_TIMEOUT", true);
  return options;
}

std::string Communicator::Describe() const {
  std::ostringstream s;
  s << "rank " << rank() << " of " << size() << " (" << transport() << ")";
  return s.str();
}

void Communicator::CheckAllReduce(std::span<const NDArray> arrays, ReduceOp op) const {
  WEFT_CHECK(!arrays.empty()) << "AllReduce: expected at least one array, found none";
  const NDArray& first = arrays[0];
  for (const NDArray& a : arrays) {
    WEFT_CHECK(!a.is_none()) << "AllReduce: expected arrays, found a null array";
    WEFT_CHECK(a.dtype() == first.dtype() && a.device() == first.device())
        << "AllReduce: the arrays of one call must share dtype and device; found "
        << first.ToString() << " and " << a.ToString();
  }
  const DType t = first.dtype();
  const bool ok = t == DType::kFloat32 || t == DType::kFloat64 ||
                  (op == ReduceOp::kSum && (t == DType::kInt32 || t == DType::kInt64));
  WEFT_CHECK(ok) << "AllReduce: expected float32 or float64 (int32 or int64 for a sum), found "
                 << t;
}

void Communicator::CheckBroadcast(const NDArray& array, int root) const {
  WEFT_CHECK(!array.is_none()) << "Broadcast: expected an array, found a null array";
  WEFT_CHECK(root >= 0 && root < size())
      << "Broadcast: expected a root in [0, " << size() << "), found " << root;
}

void Communicator::CheckAllGather(const NDArray& in, const NDArray& out) const {
  WEFT_CHECK(!in.is_none() && !out.is_none())
      << "AllGather: expected two arrays, found a null array";
  WEFT_CHECK(in.dtype() == out.dtype() && in.device() == out.device())
      << "AllGather: in and out must share dtype and device; found " << in.ToString() << " and "
      << out.ToString();
  WEFT_CHECK(out.size() == in.size() * size())
      << "AllGather: expected out of " << in.size() * size() << " elements (" << size()
      << " ranks times " << in.size() << "), found " << out.ToString();
  WEFT_CHECK(!in.Overlaps(out)) << "AllGather: in and out must not overlap";
}

namespace {

class Local final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  const char* transport() const override { return "local"; }
  void AllReduce(std::span<const NDArray> arrays, ReduceOp op) override {
    CheckAllReduce(arrays, op);
  }
  void Broadcast(const NDArray& array, int root) override { CheckBroadcast(array, root); }
  void AllGather(const NDArray& in, const NDArray& out) override {
    CheckAllGather(in, out);
    in.CopyTo(out.Reshape(in.shape()));
  }
};

}  // namespace

std::unique_ptr<Communicator> LocalWorld() { return std::make_unique<Local>(); }

std::vector<std::vector<size_t>> PlanBuckets(const std::vector<size_t>& bytes,
                                             size_t bucket_bytes) {
  std::vector<std::vector<size_t>> buckets;
  size_t filled = 0;  // bytes in buckets.back(), while it is open for more
  bool open = false;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] >= bucket_bytes || bucket_bytes == 0) {
      buckets.push_back({i});
      open = false;
      continue;
    }
    if (!open) {
      buckets.emplace_back();
      filled = 0;
      open = true;
    }
    buckets.back().push_back(i);
    filled += bytes[i];
    if (filled >= bucket_bytes) open = false;
  }
  return buckets;
}

}  // namespace weft::dist
