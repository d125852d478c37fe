#include "models/nn/layers/detail/recurrent.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/counter_random.h"
#include "core/op_registry.h"
#include "models/nn/initializers.h"

namespace tctl::detail {
namespace {

// Keras' gate orders and ONNX's: LSTM i, f, c, o against i, o, f, c (ONNX gate g takes Keras gate
// kLstmToOnnx[g]); GRU z, r, h in both.
constexpr std::int64_t kLstmToOnnx[] = {0, 3, 1, 2};

// The [1, G H, width] ONNX weight of a Keras [width, G H] kernel: transposed, gates reordered.
Tensor onnx_weight(const Tensor& kernel, std::int64_t gates, bool lstm) {
  const std::int64_t width = kernel.shape()[0], columns = kernel.shape()[1], units = columns / gates;
  std::vector<float> out(static_cast<std::size_t>(width * columns));
  const float* k = kernel.data<float>();
  for (std::int64_t g = 0; g < gates; ++g) {
    const std::int64_t from = lstm ? kLstmToOnnx[g] : g;
    for (std::int64_t u = 0; u < units; ++u)
      for (std::int64_t i = 0; i < width; ++i)
        out[static_cast<std::size_t>((g * units + u) * width + i)] = k[i * columns + from * units + u];
  }
  return Tensor::from_floats(Shape{1, columns, width}, out);
}

// A Keras bias row [G H] in ONNX's gate order.
std::vector<float> onnx_bias_row(const float* b, std::int64_t gates, std::int64_t units, bool lstm) {
  std::vector<float> out(static_cast<std::size_t>(gates * units));
  for (std::int64_t g = 0; g < gates; ++g)
    for (std::int64_t u = 0; u < units; ++u)
      out[static_cast<std::size_t>(g * units + u)] = b[(lstm ? kLstmToOnnx[g] : g) * units + u];
  return out;
}

// v [batch, steps, ...] with its steps in reverse order: ONNX's Slice from the last step back past the first.
std::string onnx_reverse_steps(OnnxWriter& w, const std::string& layer, const std::string& v) {
  constexpr std::int64_t kBeforeFirst = std::numeric_limits<std::int64_t>::min();
  return w.op("Slice", layer,
              {v, w.int_initializer(layer + "/starts", {-1}), w.int_initializer(layer + "/ends", {kBeforeFirst}),
               w.int_initializer(layer + "/axes", {1}), w.int_initializer(layer + "/steps", {-1})});
}

}  // namespace

RecurrentLayer::RecurrentLayer(std::string type, LayerArgs& args, bool gated)
    : Layer(std::move(type), args.name, args.device), gated_(gated) {
  SpecReader& s = args.spec;
  units_ = s.positive_int("units");
  if (gated_) {
    s.one_of("activation", {"tanh"}, "tanh");
    s.one_of("recurrent_activation", {"sigmoid"}, "sigmoid");
  } else {
    activation_ = s.one_of("activation", {"tanh", "relu"}, "tanh");
  }
  use_bias_ = s.boolean("use_bias", true);
  kernel_init_ = s.one_of("kernel_initializer", initializer_names(), "glorot_uniform");
  recurrent_init_ = s.one_of("recurrent_initializer", initializer_names(), "orthogonal");
  bias_init_ = s.one_of("bias_initializer", initializer_names(), "zeros");
  if (this->type() == "LSTM") unit_forget_bias_ = s.boolean("unit_forget_bias", true);
  if (this->type() == "GRU" && !s.boolean("reset_after", true))
    s.fail("reset_after", "only reset_after true (Keras 3's default, the cuDNN form) is supported");
  return_sequences_ = s.boolean("return_sequences", false);
  go_backwards_ = s.boolean("go_backwards", false);
  zero_output_for_mask_ = s.boolean("zero_output_for_mask", false);
  dropout_ = s.number_in("dropout", 0.0, 0.0, 1.0);
  recurrent_dropout_ = s.number_in("recurrent_dropout", 0.0, 0.0, 1.0);
}

RecurrentCell RecurrentLayer::cell() const {
  if (type() == "LSTM") return RecurrentCell::kLstm;
  if (type() == "GRU") return RecurrentCell::kGru;
  return activation_ == "relu" ? RecurrentCell::kSimpleRelu : RecurrentCell::kSimpleTanh;
}

Shape RecurrentLayer::build(const Shape& input, const BuildContext& ctx, const SpecReader& where) {
  if (input.rank() != 2)
    where.fail_here(type() + " expects a sequence of shape (None, steps, features), got " +
                    Shape::concat(-1, input).keras_string());
  steps_ = input[0];
  features_ = input[1];
  if (steps_ < 1 || features_ < 1) where.fail_here(type() + " needs at least one step of at least one feature");
  // Sizes past this are typos, and would otherwise surface as an allocation failure (or overflow here).
  constexpr std::int64_t kMaxKernelElements = std::int64_t{1} << 31;
  const std::int64_t gates = recurrent_gates(cell());
  if (units_ > kMaxKernelElements / gates / features_ || units_ > kMaxKernelElements / gates / units_)
    where.fail("units", "kernels of " + std::to_string(std::max(features_, units_)) + " x " + std::to_string(gates) +
                            " x " + std::to_string(units_) +
                            " weights are larger than the 2^31 elements tensorctl supports");
  const std::int64_t columns = gates * units_;
  // The workspace and the input's product, per example, within the largest tensor tensorctl holds.
  if (cost_product(recurrent_planes(cell()) + gates, cost_product(steps_, units_)) > kMaxTensorElements)
    where.fail("units", std::to_string(steps_) + " steps of " + std::to_string(units_) +
                            " units need a workspace larger than the 2^36 elements per example tensorctl supports");
  const std::uint64_t base = ctx.key();
  const Shape kernel{features_, columns}, recurrent{units_, columns};
  add_variable(ctx, "kernel", kernel, [&] { return initialize(kernel_init_, kernel, features_, columns, base); });
  add_variable(ctx, "recurrent_kernel", recurrent,
               [&] { return initialize(recurrent_init_, recurrent, units_, columns, mix64(base + 1)); });
  if (use_bias_) {
    const Shape bias = recurrent_bias_shape(cell(), columns);
    add_variable(ctx, "bias", bias, [&] {
      Tensor b = initialize(bias_init_, bias, features_, columns, mix64(base + 2));
      // Keras' unit_forget_bias: the forget gate's bias starts at 1, whatever the initializer drew.
      if (cell() == RecurrentCell::kLstm && unit_forget_bias_)
        std::fill_n(b.mutable_data<float>() + units_, units_, 1.0f);
      return b;
    });
  }
  dropout_stream_ = static_cast<std::int64_t>(ctx.key(0x44726f70ull) >> 1);
  recurrent_stream_ = static_cast<std::int64_t>(ctx.key(0x52656344ull) >> 1);
  return return_sequences_ ? Shape{steps_, units_} : Shape{units_};
}

Output RecurrentLayer::call_in_time(Graph& g, Output x, Output mask, bool training, bool reverse) {
  // Keras 3 drops the same inputs at every step of a sequence; here each step draws its own mask.
  if (training && dropout_ > 0.0) x = g.add("Dropout", {x}, Attrs{{"rate", dropout_}, {"stream", dropout_stream_}});
  const Output xp = g.add("MatMul", {x, read(g, 0)});
  const std::int64_t columns = recurrent_gates(cell()) * units_;
  const Shape bias = recurrent_bias_shape(cell(), columns);
  const Output b = use_bias_ ? read(g, 2) : g.constant(Tensor::zeros(DType::kF32, bias));
  std::vector<Output> inputs{xp, read(g, 1), b};
  if (mask.valid()) inputs.push_back(mask);
  Attrs attrs{{"cell", recurrent_cell_name(cell())}, {"go_backwards", std::int64_t{go_backwards_}}};
  if (training && recurrent_dropout_ > 0.0) {
    attrs.set("recurrent_dropout", recurrent_dropout_);
    attrs.set("stream", recurrent_stream_);
  }
  const Output ws = g.add("Recurrence", std::move(inputs), std::move(attrs));
  std::vector<Output> outputs{ws};
  if (mask.valid() && zero_output_for_mask_ && return_sequences_) outputs.push_back(mask);
  return g.add("RecurrenceOutput", std::move(outputs),
               Attrs{{"return_sequences", std::int64_t{return_sequences_}},
                     {"reverse", std::int64_t{reverse}},
                     {"go_backwards", std::int64_t{go_backwards_}}});
}

nlohmann::json RecurrentLayer::config() const {
  nlohmann::json c = {{"units", units_}};
  c["activation"] = activation_;
  if (gated_) c["recurrent_activation"] = "sigmoid";
  c["use_bias"] = use_bias_;
  c["kernel_initializer"] = kernel_init_;
  c["recurrent_initializer"] = recurrent_init_;
  c["bias_initializer"] = bias_init_;
  if (type() == "LSTM") c["unit_forget_bias"] = unit_forget_bias_;
  if (type() == "GRU") c["reset_after"] = true;
  c["dropout"] = dropout_;
  c["recurrent_dropout"] = recurrent_dropout_;
  c["return_sequences"] = return_sequences_;
  c["go_backwards"] = go_backwards_;
  c["zero_output_for_mask"] = zero_output_for_mask_;
  return c;
}

// The workspace: its planes of [steps, units] per example.
std::int64_t RecurrentLayer::inner_activation_elements() const {
  return cost_product(recurrent_planes(cell()) + recurrent_gates(cell()), cost_product(steps_, units_));
}

// ONNX's own LSTM, GRU (linear_before_reset 1, Keras' reset_after) or RNN on the sequence made time-major,
// forward on the sequence reversed for go_backwards (whose outputs Keras gives in the order it ran them).
std::string RecurrentLayer::onnx_cell(OnnxWriter& w, const std::string& x) const {
  const RecurrentCell c = cell();
  const std::int64_t gates = recurrent_gates(c), columns = gates * units_;
  const bool lstm = c == RecurrentCell::kLstm;
  std::vector<float> bias(static_cast<std::size_t>(2 * columns), 0.0f);
  if (use_bias_) {
    const Tensor b = value("bias");
    const std::vector<float> in = onnx_bias_row(b.data<float>(), gates, units_, lstm);
    std::copy(in.begin(), in.end(), bias.begin());
    if (c == RecurrentCell::kGru) {
      const std::vector<float> rec = onnx_bias_row(b.data<float>() + columns, gates, units_, false);
      std::copy(rec.begin(), rec.end(), bias.begin() + columns);
    }
  }
  std::vector<OnnxAttr> attrs{OnnxAttr::integer("hidden_size", units_)};
  std::string op = "RNN";
  if (lstm) op = "LSTM";
  if (c == RecurrentCell::kGru) {
    op = "GRU";
    attrs.push_back(OnnxAttr::integer("linear_before_reset", 1));
  }
  if (c == RecurrentCell::kSimpleRelu) attrs.push_back(OnnxAttr::texts("activations", {"Relu"}));
  const std::string wk = w.weight(variable_name("kernel") + "_onnx", onnx_weight(value("kernel"), gates, lstm));
  const std::string rk =
      w.weight(variable_name("recurrent_kernel") + "_onnx", onnx_weight(value("recurrent_kernel"), gates, lstm));
  const std::string bk = w.initializer(variable_name("bias") + "_onnx", {1, 2 * columns}, bias);
  return w.op(op, name(), {x, wk, rk, bk}, attrs);
}

std::string RecurrentLayer::onnx_in_time(OnnxWriter& w, const std::string& x, bool reverse) const {
  std::string seq = go_backwards_ ? onnx_reverse_steps(w, name(), x) : x;
  seq = w.op("Transpose", name(), {seq}, {OnnxAttr::ints("perm", {1, 0, 2})});
  // Y is [steps, directions = 1, batch, units].
  std::string y = onnx_cell(w, seq);
  y = w.op("Reshape", name(), {y, w.int_initializer(name() + "/shape", {steps_, -1, units_})});
  if (!return_sequences_) {
    y = w.op("Gather", name(), {y, w.int_initializer(name() + "/last", {steps_ - 1})}, {OnnxAttr::integer("axis", 0)});
    return w.op("Reshape", name(), {y, w.int_initializer(name() + "/out_shape", {-1, units_})});
  }
  y = w.op("Transpose", name(), {y}, {OnnxAttr::ints("perm", {1, 0, 2})});
  return reverse ? onnx_reverse_steps(w, name(), y) : y;
}

}  // namespace tctl::detail

namespace tctl::detail {

void keras_recurrent(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk, const std::string& type) {
  out["units"] = c.positive_int("units");
  const bool gated = type != "SimpleRNN";
  const std::string activation = c.has("activation") ? c.activation("activation", false) : "tanh";
  if (activation != "tanh" && (gated || activation != "relu"))
    c.fail("activation",
           "activation \"" + activation + "\" is not supported (supported: " + (gated ? "tanh" : "tanh, relu") + ")");
  out["activation"] = activation;
  if (gated) {
    const std::string recurrent =
        c.has("recurrent_activation") ? c.activation("recurrent_activation", false) : "sigmoid";
    if (recurrent != "sigmoid")
      c.fail("recurrent_activation",
             "recurrent_activation \"" + recurrent + "\" is not supported (supported: sigmoid)");
    out["recurrent_activation"] = "sigmoid";
  }
  out["use_bias"] = c.boolean("use_bias", true);
  out["kernel_initializer"] = c.initializer("kernel_initializer", keras_weight_initializers(), "glorot_uniform");
  out["recurrent_initializer"] = c.initializer("recurrent_initializer", keras_weight_initializers(), "orthogonal");
  out["bias_initializer"] = c.initializer("bias_initializer", keras_weight_initializers(), "zeros");
  if (type == "LSTM") out["unit_forget_bias"] = c.boolean("unit_forget_bias", true);
  if (type == "GRU") {
    if (!c.boolean("reset_after", true))
      c.fail("reset_after", "only reset_after true (Keras 3's default, the cuDNN form) is supported");
    out["reset_after"] = true;
  }
  for (const char* key : {"dropout", "recurrent_dropout"}) {
    const double v = c.number(key, 0.0);
    if (!(v >= 0.0 && v < 1.0)) c.fail(key, std::string(key) + " must be in [0, 1), got " + std::to_string(v));
    out[key] = v;
  }
  out["return_sequences"] = c.boolean("return_sequences", false);
  out["go_backwards"] = c.boolean("go_backwards", false);
  // How Keras computes the same maths: unrolled or not, its kernel's implementation, cuDNN or not.
  out["zero_output_for_mask"] = c.boolean("zero_output_for_mask", false);
  for (const char* key : {"unroll", "implementation", "use_cudnn", "seed"}) c.take(key);
  c.require_false({"return_state", "stateful", "time_major"});
  c.require_null({"kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer",
                  "kernel_constraint", "recurrent_constraint", "bias_constraint"});
  walk.rank = out["return_sequences"].get<bool>() ? 2 : 1;
}

}  // namespace tctl::detail
