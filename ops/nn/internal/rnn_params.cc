#include "ops/nn/rnn_params.h"

#include <sstream>

#include "core/error.h"

namespace weft {

const char* RnnModeName(RnnMode mode) {
  switch (mode) {
    case RnnMode::kLstm:
      return "lstm";
    case RnnMode::kGru:
      return "gru";
    case RnnMode::kRnnTanh:
      return "rnn_tanh";
    case RnnMode::kRnnRelu:
      return "rnn_relu";
  }
  return "?";
}

int RnnGates(RnnMode mode) {
  switch (mode) {
    case RnnMode::kLstm:
      return 4;
    case RnnMode::kGru:
      return 3;
    default:
      return 1;
  }
}

RnnDims RnnDimsOf(const RnnParam& p, const Shape& data) {
  const bool plain = data.ndim() == 3;
  return {plain ? data[0] : 0, plain ? data[1] : 0,     plain ? data[2] : 0, p.state_size,
          p.num_layers,        p.bidirectional ? 2 : 1, RnnGates(p.mode)};
}

namespace {

// a * b + c, or false when it does not fit int64.
bool MulAdd(int64_t a, int64_t b, int64_t c, int64_t* out) {
  int64_t product;
  return !__builtin_mul_overflow(a, b, &product) && !__builtin_add_overflow(product, c, out);
}

// The elements of one block whose weight_ih has `input` columns: rows * (input + H + 2).
bool BlockSize(int64_t rows, int64_t input, int64_t h, int64_t* out) {
  int64_t columns;
  return MulAdd(1, input, h + 2, &columns) && MulAdd(rows, columns, 0, out);
}

}  // namespace

// In closed form, so that attributes of a billion layers cost nothing to check: layer 0's blocks
// read I_0 = input_size, every later layer's read D * H.
RnnParamLayout::RnnParamLayout(const RnnParam& p, int64_t input_size)
    : p_(p), d_(RnnDimsOf(p, Shape{1, 1, input_size})) {
  int64_t rest;
  const bool fits = BlockSize(d_.Rows(), d_.LayerInput(0), d_.h, &first_block_) &&
                    BlockSize(d_.Rows(), d_.LayerInput(1), d_.h, &later_block_) &&
                    MulAdd(int64_t{d_.layers - 1} * d_.dirs, later_block_, 0, &rest) &&
                    MulAdd(d_.dirs, first_block_, rest, &size_);
  if (!fits) {
    WEFT_THROW("RNN: the parameter vector of these attributes has more than 2^63 elements: "
               << Describe());
  }
}

RnnBlock RnnParamLayout::Block(int layer, int dir) const {
  RnnBlock b;
  b.input = d_.LayerInput(layer);
  b.weight_ih =
      layer == 0 ? dir * first_block_
                 : d_.dirs * first_block_ + ((layer - 1) * int64_t{d_.dirs} + dir) * later_block_;
  b.weight_hh = b.weight_ih + d_.Rows() * b.input;
  b.bias_ih = b.weight_hh + d_.Rows() * d_.h;
  b.bias_hh = b.bias_ih + d_.Rows();
  return b;
}

std::string RnnParamLayout::Name(const std::string& what, int layer, int dir) {
  return what + "_l" + std::to_string(layer) + (dir == 1 ? "_reverse" : "");
}

std::vector<RnnTensor> RnnParamLayout::Tensors() const {
  const int64_t rows = d_.Rows();
  std::vector<RnnTensor> out;
  for (int l = 0; l < d_.layers; ++l) {
    for (int dir = 0; dir < d_.dirs; ++dir) {
      const RnnBlock b = Block(l, dir);
      out.push_back({Name("weight_ih", l, dir), b.weight_ih, Shape{rows, b.input}});
      out.push_back({Name("weight_hh", l, dir), b.weight_hh, Shape{rows, d_.h}});
      out.push_back({Name("bias_ih", l, dir), b.bias_ih, Shape{rows}});
      out.push_back({Name("bias_hh", l, dir), b.bias_hh, Shape{rows}});
    }
  }
  return out;
}

std::string RnnParamLayout::Describe() const {
  const int64_t h = d_.h, rows = d_.Rows(), layers = d_.layers, dirs = d_.dirs;
  std::ostringstream os;
  os << layers * dirs << " block(s) (" << layers << " layer(s) x " << dirs
     << " direction(s)), each weight_ih (" << rows << ", I_l) + weight_hh (" << rows << ", " << h
     << ") + bias_ih (" << rows << ") + bias_hh (" << rows << ") with " << rows << " = " << d_.gates
     << " gate(s) of " << RnnModeName(p_.mode) << " x state_size " << h
     << ", I_0 = " << d_.LayerInput(0) << " (data's last axis)";
  if (layers > 1) os << " and I_l = " << d_.LayerInput(1) << " after";
  // Each block is rows * (I_l + H + 2) elements (the product printed where it fits).
  const auto block = [&](int64_t input) {
    int64_t n;
    return BlockSize(rows, input, h, &n) ? std::to_string(n)
                                         : std::to_string(rows) + " x (" + std::to_string(input) +
                                               " + " + std::to_string(h) + " + 2)";
  };
  os << ": " << dirs << " x " << block(d_.LayerInput(0));
  if (layers == 2) os << " + " << dirs << " x " << block(d_.LayerInput(1));
  if (layers > 2)
    os << " + " << layers - 1 << " x (" << dirs << " x " << block(d_.LayerInput(1)) << ")";
  os << " (PyTorch's nn."
     << (p_.mode == RnnMode::kLstm  ? "LSTM"
         : p_.mode == RnnMode::kGru ? "GRU"
                                    : "RNN")
     << " layout)";
  return os.str();
}

RnnSlots RnnSlotsOf(const RnnParam& p) {
  RnnSlots s{};
  int next = RnnSlots::kState + 1;
  s.state_cell = p.mode == RnnMode::kLstm ? next++ : -1;
  s.lengths = p.use_sequence_length ? next++ : -1;
  s.num_inputs = next;
  next = RnnSlots::kOut + 1;
  s.state_out = p.state_outputs ? next++ : -1;
  s.state_cell_out = p.state_outputs && p.mode == RnnMode::kLstm ? next++ : -1;
  s.reserve = next++;
  s.num_outputs = next;
  return s;
}

}  // namespace weft
