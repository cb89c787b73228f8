#include "ops/nn/rnn_params.h"

#include <sstream>

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

RnnParamLayout::RnnParamLayout(const RnnParam& p, int64_t input_size)
    : p_(p), input_size_(input_size), dirs_(p.bidirectional ? 2 : 1) {
  const RnnDims d = RnnDimsOf(p, Shape{1, 1, input_size});
  for (int l = 0; l < d.layers; ++l) {
    for (int dir = 0; dir < d.dirs; ++dir) {
      RnnBlock b;
      b.input = d.LayerInput(l);
      b.weight_ih = size_;
      b.weight_hh = b.weight_ih + d.Rows() * b.input;
      b.bias_ih = b.weight_hh + d.Rows() * d.h;
      b.bias_hh = b.bias_ih + d.Rows();
      size_ = b.bias_hh + d.Rows();
      blocks_.push_back(b);
    }
  }
}

std::string RnnParamLayout::Name(const std::string& what, int layer, int dir) {
  return what + "_l" + std::to_string(layer) + (dir == 1 ? "_reverse" : "");
}

std::vector<RnnTensor> RnnParamLayout::Tensors() const {
  const int64_t rows = RnnGates(p_.mode) * static_cast<int64_t>(p_.state_size);
  std::vector<RnnTensor> out;
  for (int l = 0; l < p_.num_layers; ++l) {
    for (int dir = 0; dir < dirs_; ++dir) {
      const RnnBlock& b = Block(l, dir);
      out.push_back({Name("weight_ih", l, dir), b.weight_ih, Shape{rows, b.input}});
      out.push_back({Name("weight_hh", l, dir), b.weight_hh, Shape{rows, p_.state_size}});
      out.push_back({Name("bias_ih", l, dir), b.bias_ih, Shape{rows}});
      out.push_back({Name("bias_hh", l, dir), b.bias_hh, Shape{rows}});
    }
  }
  return out;
}

std::string RnnParamLayout::Describe() const {
  const int64_t h = p_.state_size, rows = RnnGates(p_.mode) * h;
  std::ostringstream os;
  os << p_.num_layers * dirs_ << " block(s) (" << p_.num_layers << " layer(s) x " << dirs_
     << " direction(s)), each weight_ih (" << rows << ", I_l) + weight_hh (" << rows << ", " << h << ") + bias_ih ("
     << rows << ") + bias_hh (" << rows << ") with " << rows << " = " << RnnGates(p_.mode) << " gate(s) of "
     << RnnModeName(p_.mode) << " x state_size " << h << ", I_0 = " << input_size_ << " (data's last axis)";
  if (p_.num_layers > 1) os << " and I_l = " << dirs_ * h << " after";
  os << ": ";
  for (int l = 0; l < p_.num_layers; ++l) {
    const int64_t block = rows * (Block(l, 0).input + h + 2);
    os << (l ? " + " : "") << dirs_ << " x " << block;
  }
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
