// The RNN operator's contract, device neutral: LSTM, GRU and plain (tanh, relu) recurrent networks
// of several layers, one or two directions, over sequence-major data, with PyTorch's formulas and
// PyTorch's parameter layout. The definition (ops/nn/rnn.cc) parses and checks with what is here;
// the CPU (ops/cpu/rnn*.cc) and GPU computes read the same structs, offsets and slots.
//
//   const RnnParam& p = attrs.Get<RnnParam>();
//   const RnnDims d = RnnDimsOf(p, data.shape());             // T, N, I, H, L, D, G
//   const RnnParamLayout layout(p, d.i);                       // where weight_hh_l1_reverse is
//   const RnnSlots s = RnnSlotsOf(p);                          // which input is the cell state
//
// ---- RNN(data, parameters, state[, state_cell][, sequence_length]) ----
//
// Attributes: mode (lstm | gru | rnn_tanh | rnn_relu, required), state_size H (>= 1, required),
// num_layers L (default 1), bidirectional (D = 2 directions, default false), p (dropout on the
// input of every layer after the first, in training only, in [0, 1), default 0), state_outputs
// (default false), use_sequence_length (default false). G gates: 4 for lstm, 3 for gru, 1 else.
//
//   data             (T, N, I)        T steps of N sequences, sequence-major
//   parameters       (P,)             every layer's weights and biases, laid out as below
//   state            (L*D, N, H)      initial hidden state h0; row l*D + d: layer l, direction d
//   state_cell       (L*D, N, H)      initial cell state c0; lstm only
//   sequence_length  (N,)             with use_sequence_length: each sequence's length, in
//                                     [1, T], stored in data's dtype, int32 or int64; a CPU
//                                     array on every device (Op::host_inputs: cuDNN takes
//                                     the lengths on the host), as PyTorch's lengths are
// Outputs (visible, then one hidden):
//   out              (T, N, D*H)      the last layer's h at every step; [..., H:2H] is the
//                                     reverse direction's
//   state_output     (L*D, N, H)      with state_outputs: every layer's final h
//   state_cell_output (L*D, N, H)     with state_outputs, lstm only: every layer's final c
//   reserve          (bytes,) uint8   hidden: what a training forward hands its backward (below)
//
// Per layer l and direction d, with x_t the layer's input (data for l = 0, the previous layer's
// out for l > 0, through dropout in training) and h, c the state carried from the previous step
// (h0, c0 at the first; the reverse direction runs from the last step to the first), PyTorch's
// nn.LSTM, nn.GRU and nn.RNN, with W_* rows of weight_ih, U_* of weight_hh, b_* of bias_ih, and
// a_* of bias_hh:
//   lstm:  i = sig(W_i x + b_i + U_i h + a_i)   f = sig(W_f x + b_f + U_f h + a_f)
//          g = tanh(W_g x + b_g + U_g h + a_g)  o = sig(W_o x + b_o + U_o h + a_o)
//          c' = f * c + i * g                   h' = o * tanh(c')
//   gru:   r = sig(W_r x + b_r + U_r h + a_r)   z = sig(W_z x + b_z + U_z h + a_z)
//          n = tanh(W_n x + b_n + r * (U_n h + a_n))                   h' = (1 - z) * n + z * h
//          (the reset gate after the recurrent product: cuDNN's, PyTorch's, oneDNN's lbr_gru)
//   rnn_tanh, rnn_relu:  h' = act(W x + b + U h + a)
//
// Sequence lengths (PyTorch's packed sequences): sequence n has steps [0, len_n). Both directions
// run over those steps only (the reverse one starts at step len_n - 1); out is zero at the steps
// from len_n on, those steps get no gradient, and the final states are those after step len_n - 1
// (forward) and after step 0 (reverse). A length outside [1, T] is an error when the op runs.
//
// ---- The flat parameter vector (PyTorch's layout) ----
//
// For each layer l = 0..L-1, for each direction d (0, then 1 = reverse), one block of
//   weight_ih (G*H, I_l)   weight_hh (G*H, H)   bias_ih (G*H,)   bias_hh (G*H,)
// row-major, one after the other; I_0 = I, I_l = D*H after. The G row blocks of H rows are the
// gates in PyTorch's order: lstm i, f, g, o; gru r, z, n. These are the tensors of a PyTorch
// state_dict, named weight_ih_l<l>, weight_hh_l<l>, bias_ih_l<l>, bias_hh_l<l>, with "_reverse"
// after the layer for d = 1, in the order of PyTorch's _flat_weights. The same on every device:
// the only format that is saved; a device that wants its library's layout converts from it.
//
// ---- The reserve (the hidden last output) and the backward ----
//
// The reserve holds what a training forward leaves for its backward on the device it ran on
// (oneDNN's workspaces and the inter-layer activations on the CPU, cuDNN's reserve space on a
// GPU). Its size is the device's: shape inference without a device gives (0,), and each device's
// compute file registers the size of its own slot as its DeviceImpl's output_shapes
// (ops/op.h), given the attributes and the input shapes only (so sized for the largest dtype that
// device computes). Binding a graph and imperative calls infer shapes for their device, so the
// memory plan allocates the slot, the engine orders the backward after the forward that wrote it,
// and frees it when no reader is left. Every device keeps this contract:
//   - a forward writes the reserve only with is_train and a request other than kNull; the request
//     is kNull when no backward reads it (then a training forward may skip its bookkeeping);
//   - exactly one _backward_RNN reads it, and may change it (its Op::mutate_inputs): one training
//     forward serves one backward. The CPU marks its reserve so that a backward without a
//     training forward before it is a weft::Error rather than garbage.
//
// _backward_RNN(reserve, out, out_grad, [state_output_grad, [state_cell_output_grad]], data,
//               parameters, state, [state_cell], [sequence_length])
//   -> (d_data, d_parameters, d_state[, d_state_cell])
// takes the forward's attributes, its outputs reserve (first, the input it changes) and out, the
// gradients of its visible outputs and its inputs (RnnSlots places them). sequence_length gets no
// gradient. Each output's request is honoured on its own, kAddTo adds; kNull for d_parameters
// skips the weight-gradient work where the library allows it (cuDNN's backward weights, the
// CPU's loops), but oneDNN's RNN backward computes the weight gradients with the data gradients,
// with no way to leave them out: the CPU's oneDNN path computes them into scratch and drops them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"

namespace weft {

enum class RnnMode : uint8_t { kLstm, kGru, kRnnTanh, kRnnRelu };

// "lstm", "gru", "rnn_tanh", "rnn_relu": the attribute's spelling.
const char* RnnModeName(RnnMode mode);
// Gates per cell: 4, 3, 1, 1.
int RnnGates(RnnMode mode);

struct RnnParam {
  RnnMode mode;
  int state_size;  // H
  int num_layers;  // L
  bool bidirectional;
  double p;  // dropout between layers, training only, in [0, 1)
  bool state_outputs;
  bool use_sequence_length;
};

// The extents of one call.
struct RnnDims {
  int64_t t, n, i, h;  // steps, sequences, input size, state size
  int layers, dirs, gates;

  int64_t LayerInput(int layer) const { return layer == 0 ? i : dirs * h; }  // I_l
  int64_t Rows() const { return gates * h; }                                 // of each weight
  Shape State() const { return Shape{int64_t{layers} * dirs, n, h}; }        // (L*D, N, H)
  Shape Output() const { return Shape{t, n, dirs * h}; }                     // (T, N, D*H)
};

// data (T, N, I) with the attributes' H, L, D, G; data is checked by shape inference.
RnnDims RnnDimsOf(const RnnParam& p, const Shape& data);

// One tensor of the flat parameter vector: its state_dict name, first element and shape.
struct RnnTensor {
  std::string name;  // "weight_ih_l0", "bias_hh_l1_reverse", ...
  int64_t offset;
  Shape shape;
};

// One (layer, direction) block of the flat vector; offsets in elements.
struct RnnBlock {
  int64_t weight_ih, weight_hh, bias_ih, bias_hh;
  int64_t input;  // I_l: the columns of weight_ih
};

// Where every tensor sits in the flat vector of these attributes and input size.
class RnnParamLayout {
 public:
  // O(1) whatever the number of layers; throws weft::Error when P does not fit int64.
  RnnParamLayout(const RnnParam& p, int64_t input_size);

  RnnBlock Block(int layer, int dir) const;
  int64_t size() const { return size_; }  // P: elements of the whole vector
  // Every tensor in PyTorch's order (that of nn.LSTM._flat_weights_names).
  std::vector<RnnTensor> Tensors() const;
  // How P is made up, for errors: "4 blocks (2 layers x 2 directions) of weight_ih (512, I_l) ...".
  std::string Describe() const;
  // "weight_ih_l0", "weight_hh_l1_reverse": PyTorch's name of part `what` of block (layer, dir).
  static std::string Name(const std::string& what, int layer, int dir);

 private:
  RnnParam p_;
  RnnDims d_;                                  // I, H, L, D, G of these attributes (T = N = 1)
  int64_t first_block_ = 0, later_block_ = 0;  // elements of a block of layer 0, of any later layer
  int64_t size_ = 0;
};

// Where the inputs and outputs of RNN and _backward_RNN sit for one set of attributes (-1: absent).
struct RnnSlots {
  // RNN's inputs: data 0, parameters 1, state 2, then these.
  int state_cell, lengths, num_inputs;
  // RNN's outputs: out 0, then these; `reserve` is the last, the visible ones are those before it.
  int state_out, state_cell_out, reserve, num_outputs;

  static constexpr int kData = 0, kParams = 1, kState = 2, kOut = 0;

  // _backward_RNN's inputs: reserve, out, the gradient of each visible output, RNN's inputs.
  static constexpr int kBackwardReserve = 0, kBackwardOut = 1;
  int BackwardOutGrad(int output) const { return 2 + output; }
  int BackwardInput(int forward_input) const { return 2 + reserve + forward_input; }
  int BackwardNumInputs() const { return 2 + reserve + num_inputs; }
  // _backward_RNN's outputs: the gradient of RNN's input i is output i; lengths get none.
  int BackwardNumOutputs() const { return lengths < 0 ? num_inputs : num_inputs - 1; }
};

RnnSlots RnnSlotsOf(const RnnParam& p);

}  // namespace weft
