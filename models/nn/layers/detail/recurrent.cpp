#include "models/nn/layers/detail/recurrent.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "core/counter_random.h"
#include "core/device.h"
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

// x W, or EmbeddingMatMul of the table and the ids where x is an Embedding's rows and both run on the CPU:
// the product taken once per distinct id (kernels/cpu/embedding_matmul.cpp; bench_workloads lstm_text_b64).
// The Embedding node is superseded: unless another layer reads it (a Parallel's other branch), the table's
// update does not wait for it and the plan leaves it out.
Output input_projection(Graph& g, Output x, Output kernel) {
  const Node& from = g.node(x);
  if (from.op->name != "Embedding" || !is_cpu_name(from.device) || !is_cpu_name(g.current_device()))
    return g.add("MatMul", {x, kernel});
  const Output table{from.inputs[0], g.id()}, ids{from.inputs[1], g.id()};
  const Output xp = g.add("EmbeddingMatMul", {table, ids, kernel});
  g.supersede(x.node);
  return xp;
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
  // As Keras 3, the same inputs dropped at every step of a sequence.
  if (training && dropout_ > 0.0)
    x = g.add("Dropout", {x},
              Attrs{{"rate", dropout_}, {"stream", dropout_stream_}, {"per_sequence", std::int64_t{1}}});
  const Output xp = input_projection(g, x, read(g, 0));
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
  // zero_output_for_mask: zeros at every padding step, and without return_sequences where the last step run
  // read padding (Keras 3 takes the last of its masked outputs, so a row padded after its ids gives zeros).
  if (mask.valid() && zero_output_for_mask_) outputs.push_back(mask);
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
std::string RecurrentLayer::onnx_cell(OnnxWriter& w, const std::string& x, const std::string& lengths) const {
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
  std::vector<std::string> inputs{x, wk, rk, bk};
  if (!lengths.empty()) inputs.push_back(lengths);
  return w.op(op, name(), inputs, attrs);
}

// Without a mask: the sequence made time-major through ONNX's own cell, forward on the sequence reversed for
// go_backwards (whose outputs Keras gives in the order it ran them).
//
// With one, the cell must skip the padding steps wherever they are, and ONNX's cells skip only those past a
// sequence_lens. So the steps are moved first: step t, kept, to c_t - 1, where c_t counts the kept steps up
// to t (a CumSum of the mask); padding after them, in order. The cell runs over the first c_T of each row, and
// the output at step t is the cell's output at c_t - 1 (zeros where c_t is 0): at a kept step its own, at a
// padding step the state carried over, as the Recurrence kernel gives them; zero_output_for_mask multiplies
// by the mask.
std::string RecurrentLayer::onnx_in_time(OnnxWriter& w, const std::string& x, bool reverse,
                                         const std::string& mask) const {
  const std::string& n = name();
  std::string seq = go_backwards_ ? onnx_reverse_steps(w, n, x) : x;
  std::string lengths, counts, m;
  if (!mask.empty()) {
    m = go_backwards_ ? onnx_reverse_steps(w, n, mask) : mask;
    counts = w.op("CumSum", n, {m, w.int_scalar(n + "/time_axis", 1)});  // c_t, [N, T]
    const std::string total = w.op("ReduceSum", n, {m, w.int_initializer(n + "/steps_axis", {1})},
                                   {OnnxAttr::integer("keepdims", 1)});  // c_T, [N, 1]
    std::vector<float> iota(static_cast<std::size_t>(steps_));
    for (std::size_t t = 0; t < iota.size(); ++t) iota[t] = static_cast<float>(t);
    const std::string one = w.initializer(n + "/one", {}, {1.0f});
    // Kept: c_t - 1. Padding: c_T + (t - c_t), after every kept step, in order.
    const std::string kept_at = w.op("Sub", n, {counts, one});
    const std::string padding_at =
        w.op("Add", n, {total, w.op("Sub", n, {w.initializer(n + "/steps", {steps_}, iota), counts})});
    const std::string to =
        w.op("Add", n, {w.op("Mul", n, {m, kept_at}), w.op("Mul", n, {w.op("Sub", n, {one, m}), padding_at})});
    const std::string index = w.op("Cast", n, {w.op("Unsqueeze", n, {to, w.int_initializer(n + "/feature_axis", {2})})},
                                   {OnnxAttr::integer("to", 7)});  // TensorProto INT64
    seq = w.op("ScatterElements", n, {seq, w.op("Expand", n, {index, w.op("Shape", n, {seq})}), seq},
               {OnnxAttr::integer("axis", 1)});
    lengths = w.op("Cast", n, {w.op("Squeeze", n, {total, w.int_initializer(n + "/length_axis", {1})})},
                   {OnnxAttr::integer("to", 6)});  // TensorProto INT32
  }
  seq = w.op("Transpose", n, {seq}, {OnnxAttr::ints("perm", {1, 0, 2})});
  // Y is [steps, directions = 1, batch, units].
  std::string y = onnx_cell(w, seq, lengths);
  y = w.op("Reshape", n, {y, w.int_initializer(n + "/shape", {steps_, -1, units_})});
  y = w.op("Transpose", n, {y}, {OnnxAttr::ints("perm", {1, 0, 2})});  // [batch, steps, units]
  if (!mask.empty()) {
    const std::string zero = w.initializer(n + "/zero", {}, {0.0f});
    const std::string one = w.initializer(n + "/one", {}, {1.0f});
    const std::string from = w.op("Max", n, {w.op("Sub", n, {counts, one}), zero});
    const std::string index = w.op("Cast", n, {w.op("Unsqueeze", n, {from, w.int_initializer(n + "/unit_axis", {2})})},
                                   {OnnxAttr::integer("to", 7)});
    y = w.op("GatherElements", n, {y, w.op("Expand", n, {index, w.op("Shape", n, {y})})},
             {OnnxAttr::integer("axis", 1)});
    // Zeros before the first kept step, and with zero_output_for_mask at every padding step.
    std::string keep = w.op("Min", n, {counts, one});
    if (zero_output_for_mask_) keep = m;
    y = w.op("Mul", n, {y, w.op("Unsqueeze", n, {keep, w.int_initializer(n + "/keep_axis", {2})})});
  }
  if (!return_sequences_) {
    y = w.op("Gather", n, {y, w.int_initializer(n + "/last", {steps_ - 1})}, {OnnxAttr::integer("axis", 1)});
    return w.op("Reshape", n, {y, w.int_initializer(n + "/out_shape", {-1, units_})});
  }
  return reverse ? onnx_reverse_steps(w, n, y) : y;
}

}  // namespace tctl::detail

namespace tctl::detail {

void keras_recurrent(KerasConfig& c, nlohmann::json& out, KerasLayerWalk& walk, const std::string& type) {
  out["units"] = c.positive_int("units");
  const bool gated = type != "SimpleRNN";
  const std::vector<std::string> supported =
      gated ? std::vector<std::string>{"tanh"} : std::vector<std::string>{"tanh", "relu"};
  out["activation"] = c.has("activation") ? c.activation("activation", false, supported) : "tanh";
  if (gated) {
    if (c.has("recurrent_activation")) c.activation("recurrent_activation", false, {"sigmoid"});
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
  walk.take_mask(out["return_sequences"].get<bool>());
}

}  // namespace tctl::detail
