// What SimpleRNN, LSTM and GRU share (each one's file, simple_rnn.cpp, lstm.cpp, gru.cpp, holds its factory
// and Keras mapping), and what Bidirectional calls on the two layers it wraps.
//
// The layer multiplies the whole sequence by its input kernel in one MatMul ([N, T, F] x [F, G H]), then a
// Recurrence node runs the cell over the steps (core/ops/recurrent.h), and RecurrenceOutput gives the outputs:
// the whole sequence with return_sequences, else the last step's. Variables, in Keras' order: kernel [F, G H],
// recurrent_kernel [H, G H], bias ([G H], or the GRU's [2, 3 H]: input bias, then recurrent bias).
#pragma once

#include <memory>
#include <string>

#include "core/ops/recurrent.h"
#include "models/nn/layer.h"

namespace tctl::detail {

class RecurrentLayer final : public Layer {
 public:
  RecurrentLayer(std::string type, LayerArgs& args, bool gated);

  Shape build(const Shape& input, const BuildContext& ctx, const SpecReader& where) override;
  Output call(Graph& g, Output x, bool training) override { return call_in_time(g, x, Output{}, training, false); }
  // Keras keeps a recurrent layer's variables in its cell: kernel, recurrent_kernel, bias.
  std::vector<KerasWeight> keras_weights() const override {
    std::vector<KerasWeight> out = Layer::keras_weights();
    for (KerasWeight& w : out) w.path = "cell/" + w.path;
    return out;
  }
  // With a mask the states carry over the padding steps, and the outputs there are zeros with
  // zero_output_for_mask (Keras').
  MaskUse mask_use() const override { return return_sequences_ ? MaskUse::kUsesAndPasses : MaskUse::kConsumes; }
  Output call_masked(Graph& g, Output x, Output mask, bool training) override {
    return call_in_time(g, x, mask, training, false);
  }
  std::string to_onnx(OnnxWriter& w, const std::string& x) const override { return onnx_in_time(w, x, false, ""); }
  std::string to_onnx_masked(OnnxWriter& w, const std::string& x, const std::string& mask) const override {
    return onnx_in_time(w, x, false, mask);
  }
  nlohmann::json config() const override;
  std::int64_t inner_activation_elements() const override;

  // Bidirectional's: the outputs reversed in time when `reverse` (its backward layer's, whose go_backwards
  // gives them last input first); `mask` invalid for none.
  Output call_in_time(Graph& g, Output x, Output mask, bool training, bool reverse);
  // `mask` empty for none.
  std::string onnx_in_time(OnnxWriter& w, const std::string& x, bool reverse, const std::string& mask) const;
  bool return_sequences() const { return return_sequences_; }
  bool go_backwards() const { return go_backwards_; }
  // Bidirectional gives its backward copy the opposite direction, and both zero_output_for_mask when they
  // give every step's output, as Keras does.
  void set_go_backwards(bool v) { go_backwards_ = v; }
  void set_zero_output_for_mask(bool v) { zero_output_for_mask_ = v; }

 private:
  RecurrentCell cell() const;
  // ONNX's cell on the time-major x, over the first `lengths` steps of each sequence (its sequence_lens) when
  // `lengths` is not empty.
  std::string onnx_cell(OnnxWriter& w, const std::string& x, const std::string& lengths) const;

  bool gated_ = false;  // LSTM or GRU: activation and recurrent_activation are fixed
  std::int64_t units_ = 0, features_ = 0, steps_ = 0;
  std::string activation_ = "tanh";
  bool use_bias_ = true, return_sequences_ = false, go_backwards_ = false, unit_forget_bias_ = true;
  bool zero_output_for_mask_ = false;
  double dropout_ = 0.0, recurrent_dropout_ = 0.0;
  std::int64_t dropout_stream_ = 0, recurrent_stream_ = 0;
  std::string kernel_init_, recurrent_init_, bias_init_;
};

// The Keras keys the three share; `type` is "SimpleRNN", "LSTM" or "GRU".
void keras_recurrent(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk, const std::string& type);

}  // namespace tctl::detail
