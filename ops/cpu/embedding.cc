// Embedding: looks up rows of a weight matrix by index, and its backward op.
//
// Inputs: data, indices of any shape stored as float32/float64 (the fractional part is dropped),
// and weight, (input_dim, output_dim), of the same dtype. Attributes input_dim and output_dim,
// both required, >= 1. The output is data.shape + (output_dim,): out[k, :] = weight[data[k], :].
// An index outside [0, input_dim) is a weft::Error raised by the compute (it comes out of the
// output's WaitToRead), naming the index, where it is and the bound.
//
// Gradient: only for weight. `_backward_Embedding` takes (out_grad, data) and gives d weight,
// whose row j is the sum of the out_grad rows whose index is j. data gets no gradient.
#include "ops/internal/cpu_util.h"
#include "ops/op.h"

namespace weft::cpu {
namespace {

struct EmbeddingParam {
  int input_dim;
  int output_dim;
};

EmbeddingParam ParseEmbedding(AttrReader& r) {
  return {r.Int("input_dim", std::nullopt, 1), r.Int("output_dim", std::nullopt, 1)};
}

std::vector<Shape> EmbeddingShape(const Attrs& a, const std::vector<Shape>& in) {
  const EmbeddingParam& p = a.Get<EmbeddingParam>();
  const Shape weight{p.input_dim, p.output_dim};
  if (in[1] != weight) {
    WEFT_THROW("Embedding: expected weight of shape " << weight << " (input_dim, output_dim), found " << in[1]);
  }
  if (in[0].ndim() == Shape::kMaxDims) {
    WEFT_THROW("Embedding: expected data with fewer than " << Shape::kMaxDims << " axes, found " << in[0]);
  }
  Shape out = in[0];
  out.PushBack(p.output_dim);
  return {out};
}

// Checks every index in `data` (n values) against [0, input_dim); throws naming the first bad one.
template <typename T>
void CheckIndices(const char* op, const T* data, int64_t n, int input_dim) {
  for (int64_t k = 0; k < n; ++k) {
    if (!(data[k] >= 0 && data[k] < input_dim)) {  // NaN fails too
      WEFT_THROW(op << ": index " << data[k] << " at position " << k << " of data is out of range: expected "
                    << "0 <= index < " << input_dim << " (input_dim)");
    }
  }
}

// data: n indices; weight: (input_dim, output_dim); out: (n, output_dim).
void EmbeddingCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in, std::span<const OpReq> req,
                      std::span<const TensorView> out) {
  const EmbeddingParam& p = a.Get<EmbeddingParam>();
  const int64_t n = in[0].size(), dim = p.output_dim;
  WEFT_FLOAT_SWITCH(in[1].dtype(), T, "Embedding", {
    const T *idx = in[0].data<T>(), *w = in[1].data<T>();
    CheckIndices("Embedding", idx, n, p.input_dim);
    if (req[0] == OpReq::kNull) return;
    T* y = out[0].data<T>();
    ParallelFor(n, std::max<int64_t>(1, 16384 / dim), [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) StoreN(y + k * dim, req[0], w + static_cast<int64_t>(idx[k]) * dim, dim);
    });
  });
}

// out_grad: (n, output_dim); data: n indices; d weight: (input_dim, output_dim).
void EmbeddingBackwardCompute(const OpContext&, const Attrs& a, std::span<const TensorView> in,
                              std::span<const OpReq> req, std::span<const TensorView> out) {
  const EmbeddingParam& p = a.Get<EmbeddingParam>();
  const int64_t n = in[1].size(), dim = p.output_dim;
  WEFT_FLOAT_SWITCH(in[0].dtype(), T, "_backward_Embedding", {
    const T *dy = in[0].data<T>(), *idx = in[1].data<T>();
    CheckIndices("_backward_Embedding", idx, n, p.input_dim);
    if (req[0] == OpReq::kNull) return;
    T* dw = out[0].data<T>();
    if (req[0] != OpReq::kAddTo) std::fill_n(dw, out[0].size(), T(0));
    // Columns split across threads: rows that repeat an index never race.
    ParallelFor(dim, 64, [&](int64_t c0, int64_t c1) {
      for (int64_t k = 0; k < n; ++k) {
        T* row = dw + static_cast<int64_t>(idx[k]) * dim;
        const T* g = dy + k * dim;
        for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
      }
    });
  });
}

const bool registered = [] {
  WEFT_REGISTER_OP(Embedding)
      .Describe("rows of weight (input_dim, output_dim) picked by the indices in data; output data.shape + "
                "(output_dim,)")
      .Params(ParseEmbedding)
      .Inputs({"data", "weight"})
      .InferShape(EmbeddingShape)
      .Compute(DeviceType::kCpu, EmbeddingCompute)
      .Gradient([](const Attrs& a, GradBuilder& g) {
        g.SetInputGrad(1, g.Op("_backward_Embedding", {g.OutGrad(0), g.Input(0)}, a.raw()));
      });
  WEFT_REGISTER_OP(_backward_Embedding)
      .Describe("gradient of Embedding for weight: takes (out_grad, data), sums out_grad rows by index")
      .Params(ParseEmbedding)
      .Inputs({"out_grad", "data"})
      .InferShape([](const Attrs& a, const std::vector<Shape>& in) {
        const EmbeddingParam& p = a.Get<EmbeddingParam>();
        Shape out = in[1];
        out.PushBack(p.output_dim);
        CheckSameShape(in[0], out, "the output gradient and the output");
        return std::vector<Shape>{Shape{p.input_dim, p.output_dim}};
      })
      .Compute(DeviceType::kCpu, EmbeddingBackwardCompute);
  return true;
}();

}  // namespace
}  // namespace weft::cpu
