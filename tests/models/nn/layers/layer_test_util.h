// check_layer: the shared harness every layer test starts with (STYLE.md §4).
//
//   check_layer(R"({"type":"Dense","units":4})", {8});
//
// builds the layer as a one-layer Sequential for inputs of shape (None, 8) and checks
//   - the traced output shape, for a placeholder of unknown batch and for a concrete batch run through a
//     Session, against the shape build() returned;
//   - the gradient of a scalar loss sum(y * r) (r a random constant) with respect to the input and every
//     variable, against central finite differences;
//   - the JSON round trip to_json() -> from_json() -> to_json(), which must also rebuild the same weights;
//   - the summary row: name, type, output shape and parameter count;
//   - the Keras round trip: the layer written as a Keras Sequential model file imports (through the layer's
//     own mapping) to the same resolved spec; a layer without a mapping is refused by name;
//   - the ONNX export (the layer's to_onnx): the repo's own evaluator (tests/onnx/evaluate_onnx.py, numpy)
//     runs the exported model on a batch and must match the model's inference output within 1e-5;
//   - the FLOPs the profiler counts for the layer's forward nodes: proportional to the batch, and equal to
//     LayerCheckOptions::flops_per_example when the test gives it.
// Failures are reported through doctest CHECKs with the layer's JSON attached.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/autodiff.h"
#include "core/profiler.h"
#include "core/session.h"
#include "core/thread_pool.h"
#include "models/io/keras_import.h"
#include "models/io/onnx_export.h"
#include "models/nn/sequential.h"
#include "spec_error_check.h"
#include "tests/models/test_files.h"

namespace tctl::testing {

struct LayerCheckOptions {
  // Trace in training mode (dropout active). Every run of one check uses the same step, so a random mask
  // is the same in the forward pass, the gradient and each finite difference.
  bool training = false;
  std::int64_t batch = 3;
  std::uint64_t seed = 7;
  // Central differences in float32: a step of 1e-2 keeps rounding error well below the tolerance.
  float eps = 1e-2f;
  float tolerance = 2e-2f;  // relative and absolute
  // Elements checked per tensor; larger tensors are sampled at a fixed stride.
  std::int64_t max_checks_per_tensor = 48;
  // The layer's spec written as Keras would write it imports back to itself. Off only for a spec with an
  // option Keras files cannot hold (an initializer the importer refuses).
  bool keras = true;
  // The forward pass's FLOPs per example as the profiler counts them (OpDef::flops); negative: not checked
  // beyond being proportional to the batch.
  double flops_per_example = -1;
  // > 0: the inputs are whole numbers in [0, token_ids), an Embedding's ids. They get no gradient: d loss / d
  // input must be zeros, and is not differentiated numerically (an id between two is no id).
  std::int64_t token_ids = 0;
};

// What check_layer built, for the layer's own follow-up checks.
struct CheckedLayer {
  std::shared_ptr<Sequential> net;
  const Layer& layer() const { return *net->layers().front(); }
  Shape output_shape;  // without the batch
};

// Uniform floats in [lo, hi) from a fixed seed; the same on every platform.
inline std::vector<float> random_floats(std::int64_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::vector<float> out(static_cast<std::size_t>(n));
  for (auto& v : out) v = lo + (hi - lo) * static_cast<float>(static_cast<double>(rng() >> 11) * 0x1.0p-53);
  return out;
}

inline Tensor random_tensor(const Shape& shape, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  return Tensor::from_floats(shape, random_floats(shape.num_elements(), seed, lo, hi));
}

// The values a check feeds the layer: random floats in [-1, 1), or ids (LayerCheckOptions::token_ids).
inline std::vector<float> random_inputs(std::int64_t n, std::uint64_t seed, std::int64_t token_ids) {
  if (token_ids <= 0) return random_floats(n, seed);
  std::vector<float> out = random_floats(n, seed, 0.0f, static_cast<float>(token_ids));
  for (auto& v : out) v = std::floor(v);
  return out;
}

// A one-layer model spec around the layer's JSON.
inline nlohmann::json one_layer_spec(const nlohmann::json& layer, const Shape& input_shape) {
  std::vector<std::int64_t> dims(input_shape.dims().begin(), input_shape.dims().end());
  return {{"name", "layer_check"}, {"input_shape", dims}, {"layers", nlohmann::json::array({layer})}};
}

inline std::shared_ptr<Sequential> build_one_layer(const std::string& json_text, const Shape& input_shape,
                                                   std::uint64_t seed = 7) {
  return std::make_shared<Sequential>(Sequential::from_json(
      one_layer_spec(nlohmann::json::parse(json_text), input_shape), "layer_test.json", "", seed));
}

// The ops a one-layer model traces to in inference, without its placeholder and variable reads.
inline std::vector<std::string> layer_op_names(const std::string& json_text, const Shape& input_shape) {
  auto net = build_one_layer(json_text, input_shape);
  Graph g;
  net->call(g, g.placeholder("x", DType::kF32, Shape::concat(-1, input_shape)), false, "cpu");
  std::vector<std::string> ops;
  for (const Node& n : g.nodes())
    if (n.op->name != "Placeholder" && n.op->name != "ReadVariable") ops.push_back(n.op->name);
  return ops;
}

// Runs the model on x once (with automatic control dependencies, as training does) on `threads` intra-op
// threads and returns its output; in training mode that also applies the layers' state updates.
inline Tensor run_net(const Sequential& net, const Tensor& x, bool training = false, int threads = 1) {
  auto g = std::make_shared<Graph>();
  Output in = g->placeholder("x", DType::kF32, Shape::concat(-1, x.shape().without_batch()));
  Output y = net.call(*g, in, training, "cpu");
  add_auto_control_dependencies(*g);
  ThreadPool inter(1), intra(threads);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{in, x}};
  std::vector<Output> fetches{y};
  return s.run(feeds, fetches)[0];
}

namespace detail {

// Compares analytic gradient `analytic` of f at the elements of `values` with central differences.
// `set(i, v)` sets element i to v, `loss()` evaluates f. A mismatch at a point where the one-sided
// differences disagree by more than the mismatch is a kink (ReLU at 0), which is skipped, not failed;
// at most a tenth of the checked points may be kinks.
template <class SetFn, class LossFn>
void compare_with_finite_differences(const std::string& what, const std::vector<float>& values,
                                     const std::vector<float>& analytic, SetFn set, LossFn loss,
                                     const LayerCheckOptions& o) {
  const std::int64_t n = static_cast<std::int64_t>(values.size());
  REQUIRE(analytic.size() == values.size());
  const std::int64_t stride = std::max<std::int64_t>(1, (n + o.max_checks_per_tensor - 1) / o.max_checks_per_tensor);
  int checked = 0, kinks = 0, failures = 0;
  for (std::int64_t i = 0; i < n; i += stride) {
    const float v = values[static_cast<std::size_t>(i)];
    set(i, v + o.eps);
    const double up = loss();
    set(i, v - o.eps);
    const double down = loss();
    set(i, v);
    const double mid = loss();
    const double numeric = (up - down) / (2.0 * o.eps);
    const double a = analytic[static_cast<std::size_t>(i)];
    const double error = std::abs(a - numeric);
    const double allowed = o.tolerance * (1.0 + std::max(std::abs(a), std::abs(numeric)));
    ++checked;
    if (error <= allowed) continue;
    const double one_sided_gap = std::abs((up - mid) / o.eps - (mid - down) / o.eps);
    if (one_sided_gap > error) {
      ++kinks;
      continue;
    }
    if (++failures <= 5)
      CHECK_MESSAGE(error <= allowed, what << "[" << i << "]: analytic " << a << ", numeric " << numeric);
  }
  INFO(what << ": " << checked << " points, " << kinks << " at kinks, " << failures << " failures");
  CHECK(failures == 0);
  CHECK(kinks * 10 <= std::max(checked, 10));
}

// The layer written as a one-layer Keras Sequential model imports to the same resolved spec; a layer type
// with no Keras mapping is refused, naming its class.
inline void check_keras_round_trip(const Sequential& net, const Shape& input_shape, std::uint64_t seed) {
  const Layer& layer = *net.layers().front();
  nlohmann::json config = layer.to_json();
  config.erase("type");
  nlohmann::json batch_shape = nlohmann::json::array({nullptr});
  for (auto d : input_shape.dims()) batch_shape.push_back(d);
  const nlohmann::json doc = {{"class_name", "Sequential"},
                              {"config",
                               {{"name", net.name()},
                                {"layers",
                                 {{{"class_name", "InputLayer"}, {"config", {{"batch_input_shape", batch_shape}}}},
                                  {{"class_name", layer.type()}, {"config", config}}}}}}};
  INFO("Keras file: " << doc.dump());
  if (!keras_layer_mappings().contains(layer.type())) {
    INFO("a layer without a Keras mapping must not be imported");
    const SpecError e = catch_spec_error([&] { keras_to_spec(doc, "keras.json", keras_layer_mappings()); });
    CHECK(e.message().find("layer type " + layer.type()) != std::string::npos);
    return;
  }
  const nlohmann::json spec = keras_to_spec(doc, "keras.json", keras_layer_mappings());
  CHECK(Sequential::from_json(spec, "keras.json", "", seed).to_json() == net.to_json());
}

// "v0,v1,...\n" then one row per example of t ([batch, ...]), as the ONNX evaluator reads CSV.
inline std::string csv_rows(const Tensor& t) {
  const std::int64_t rows = t.shape()[0], width = t.num_elements() / std::max<std::int64_t>(rows, 1);
  std::string out;
  for (std::int64_t j = 0; j < width; ++j) out += (j ? ",v" : "v") + std::to_string(j);
  out += "\n";
  const std::vector<float> v = t.to_floats();
  char cell[32];
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < width; ++j) {
      std::snprintf(cell, sizeof cell, "%s%.9g", j ? "," : "",
                    static_cast<double>(v[static_cast<std::size_t>(i * width + j)]));
      out += cell;
    }
    out += "\n";
  }
  return out;
}

// The model's ONNX export, run by tests/onnx/evaluate_onnx.py on the batch x, gives the model's inference
// output on x.
inline void check_onnx_on(const Sequential& net, const Tensor& x) {
  OnnxExportInput in;
  in.name = net.name();
  const Shape input_shape = x.shape().without_batch();
  in.input_shape.assign(input_shape.dims().begin(), input_shape.dims().end());
  // The export's output is [batch, values], as predict writes rows: an image output is flattened after.
  in.add_network = [&net](OnnxWriter& w, const std::string& input) {
    const std::string y = net.to_onnx(w, input);
    if (net.output_shape().rank() == 1) return y;
    return w.op("Flatten", "check", {y}, {OnnxAttr::integer("axis", 1)});
  };
  in.outputs = net.output_shape().num_elements();
  in.output_name = "values";
  const std::string bytes = export_onnx(in);
  if (std::system("/usr/bin/python3 -c 'import onnx, numpy' 2>/dev/null") != 0) {
    MESSAGE("/usr/bin/python3 has no onnx module (python3-onnx): the ONNX evaluation is skipped");
    return;
  }
  const Tensor y = run_net(net, x);
  const std::string model = write_scratch_file("layer.onnx", bytes);
  const std::string rows = write_scratch_file("layer_rows.csv", csv_rows(x));
  const std::string expected = write_scratch_file("layer_expected.csv", csv_rows(y));
  const std::string report = (scratch_dir() / "layer_onnx.txt").string();
  const std::string command = "/usr/bin/python3 " TENSORCTL_SOURCE_DIR "/tests/onnx/evaluate_onnx.py " + model + " " +
                              rows + " " + expected + " > " + report + " 2>&1";
  const int status = std::system(command.c_str());
  std::ifstream f(report);
  const std::string said((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK_MESSAGE(status == 0, "evaluate_onnx.py: " << said);
}

// The layer's ONNX export, run by tests/onnx/evaluate_onnx.py on a batch, gives the model's inference output.
inline void check_onnx_export(const Sequential& built, const Shape& input_shape, const LayerCheckOptions& o) {
  // Every variable drawn from [0.5, 1.5) (a variance must be positive), so a bias that starts at zero or a
  // scale that starts at one cannot hide a term the export leaves out.
  const Sequential net = Sequential::from_json(built.to_json(), "model.json", "", o.seed);
  const auto vars = net.variables();
  for (std::size_t k = 0; k < vars.size(); ++k)
    vars[k]->assign(random_tensor(vars[k]->shape(), o.seed + 400 + k, 0.5f, 1.5f));
  const Shape x_shape = Shape::concat(o.batch, input_shape);
  check_onnx_on(net, Tensor::from_floats(x_shape, random_inputs(x_shape.num_elements(), o.seed + 303, o.token_ids)));
}

// The forward nodes' FLOPs (OpDef::flops), at two batch sizes.
inline void check_flops(const Sequential& net, const Shape& input_shape, const LayerCheckOptions& o) {
  Graph g;
  const int first = g.size() + 1;
  net.call(g, g.placeholder("x", DType::kF32, Shape::concat(-1, input_shape)), false, "cpu");
  double at_batch = 0, at_double = 0;
  for (int id = first; id < g.size(); ++id) {
    at_batch += node_flops(g, g.node(id), o.batch);
    at_double += node_flops(g, g.node(id), 2 * o.batch);
  }
  CHECK(at_batch >= 0);
  CHECK(at_double == 2 * at_batch);
  if (o.flops_per_example >= 0) CHECK(at_batch == o.flops_per_example * static_cast<double>(o.batch));
}

}  // namespace detail

inline CheckedLayer check_layer(const std::string& json_text, const Shape& input_shape,
                                const LayerCheckOptions& o = {}) {
  INFO("layer: " << json_text << " on input " << Shape::concat(-1, input_shape).keras_string()
                 << std::string(o.training ? " (training)" : ""));
  CheckedLayer result;
  result.net = build_one_layer(json_text, input_shape, o.seed);
  const Sequential& net = *result.net;
  REQUIRE(net.layers().size() == 1);
  const Layer& layer = *net.layers().front();
  result.output_shape = net.output_shape();
  CHECK(net.layer_output_shapes().size() == 1);
  CHECK(net.input_shape() == input_shape);

  // Traced with an unknown batch: the layer's nodes carry its name, and the output shape is the built one.
  {
    Graph g;
    Output x = g.placeholder("x", DType::kF32, Shape::concat(-1, input_shape));
    const int first = g.size();
    Output y = net.call(g, x, o.training, "cpu");
    CHECK(g.spec(y).dtype == DType::kF32);
    CHECK(g.spec(y).shape == Shape::concat(-1, result.output_shape));
    for (int id = first; id < g.size(); ++id) CHECK(g.node(id).layer == layer.name());
  }
  // Traced with a concrete batch: the inferred shape is concrete too.
  {
    Graph g;
    Output x = g.placeholder("x", DType::kF32, Shape::concat(o.batch, input_shape));
    Output y = net.call(g, x, o.training, "cpu");
    CHECK(g.spec(y).shape == Shape::concat(o.batch, result.output_shape));
  }

  // Gradients of sum(y * r) with respect to the input and each variable, traced with an unknown batch
  // and run with a concrete one.
  auto graph = std::make_shared<Graph>();
  Output x = graph->placeholder("x", DType::kF32, Shape::concat(-1, input_shape));
  Output y = net.call(*graph, x, o.training, "cpu");
  const Shape y_shape = Shape::concat(o.batch, result.output_shape);
  Output r = graph->constant(random_tensor(y_shape, o.seed + 101));
  Output loss = graph->add("Sum", {graph->add("Mul", {y, r})});
  std::vector<Output> xs{x};
  std::vector<std::size_t> owner{0};  // 0: the input; k: variable k-1
  const auto& vars = layer.variables();
  for (std::size_t k = 0; k < vars.size(); ++k) {
    for (const Node& n : graph->nodes()) {
      if (n.op->name != "ReadVariable" || n.vars[0].var != vars[k]) continue;
      xs.push_back(Output{n.id});
      owner.push_back(k + 1);
    }
  }
  std::vector<Output> grads = gradients(*graph, loss, xs);
  std::vector<Output> fetches{y};
  fetches.insert(fetches.end(), grads.begin(), grads.end());

  ThreadPool inter(1), intra(1);
  SessionOptions so;
  so.seed = o.seed;
  Session session(graph, inter, intra, so);
  RunOptions ro;
  ro.step = 3;
  std::vector<float> x_values = random_inputs(y_shape[0] * input_shape.num_elements(), o.seed + 202, o.token_ids);
  auto feed_x = [&] {
    return std::vector<Feed>{{x, Tensor::from_floats(Shape::concat(o.batch, input_shape), x_values)}};
  };

  std::vector<Tensor> out = session.run(feed_x(), fetches, {}, ro);
  CHECK(out[0].shape() == y_shape);
  for (float v : out[0].to_floats()) CHECK(std::isfinite(v));
  // Per gradient target (input, then variables), the summed analytic gradient.
  std::vector<std::vector<float>> analytic(vars.size() + 1);
  analytic[0] = out[1].to_floats();
  CHECK(out[1].shape() == Shape::concat(o.batch, input_shape));
  for (std::size_t k = 1; k < xs.size(); ++k) {
    std::vector<float> g = out[k + 1].to_floats();
    auto& sum = analytic[owner[k]];
    if (sum.empty()) sum.assign(g.size(), 0.0f);
    for (std::size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
  }
  std::vector<Output> loss_fetch{loss};
  auto eval_loss = [&] { return static_cast<double>(session.run(feed_x(), loss_fetch, {}, ro)[0].item()); };

  const std::vector<float> x_original = x_values;
  if (o.token_ids > 0) {
    CHECK(analytic[0] == std::vector<float>(analytic[0].size(), 0.0f));
  } else {
    detail::compare_with_finite_differences(
        "d loss / d input", x_original, analytic[0],
        [&](std::int64_t i, float v) { x_values[static_cast<std::size_t>(i)] = v; }, eval_loss, o);
  }
  for (std::size_t k = 0; k < vars.size(); ++k) {
    Variable& var = *vars[k];
    if (!var.trainable()) continue;
    const Tensor original = var.read();
    std::vector<float> w = original.to_floats();
    CHECK_MESSAGE(!analytic[k + 1].empty(), var.name() << " is never read by the layer");
    if (analytic[k + 1].empty()) continue;
    std::vector<float> current = w;
    detail::compare_with_finite_differences(
        "d loss / d " + var.name(), w, analytic[k + 1],
        [&](std::int64_t i, float v) {
          current[static_cast<std::size_t>(i)] = v;
          var.assign(Tensor::from_floats(var.shape(), current));
        },
        eval_loss, o);
    var.assign(original);
  }

  // JSON round trip: the resolved spec parses back to itself and rebuilds the same weights.
  const nlohmann::json resolved = net.to_json();
  CHECK(resolved["layers"][0] == layer.to_json());
  CHECK(layer.to_json()["type"] == layer.type());
  CHECK(layer.to_json()["name"] == layer.name());
  Sequential again = Sequential::from_json(resolved, "model.json", "", o.seed);
  CHECK(again.to_json() == resolved);
  REQUIRE(again.variables().size() == vars.size());
  for (std::size_t k = 0; k < vars.size(); ++k) {
    CHECK(again.variables()[k]->name() == vars[k]->name());
    CHECK(again.variables()[k]->read().to_floats() == vars[k]->read().to_floats());
  }
  CHECK(again.output_shape() == result.output_shape);

  // Summary row: name, type, output shape, parameters.
  std::int64_t params = 0, trainable = 0;
  for (const auto& v : vars) {
    params += v->shape().num_elements();
    if (v->trainable()) trainable += v->shape().num_elements();
    CHECK(v->name().rfind(layer.name() + "/", 0) == 0);
  }
  CHECK(layer.param_count() == params);
  CHECK(net.param_count() == params);
  CHECK(net.trainable_param_count() == trainable);
  CHECK(!layer.name().empty());
  CHECK(layer.type() == nlohmann::json::parse(json_text)["type"].get<std::string>());
  CHECK(!Shape::concat(-1, result.output_shape).keras_string().empty());

  if (o.keras) detail::check_keras_round_trip(net, input_shape, o.seed);
  detail::check_onnx_export(net, input_shape, o);
  detail::check_flops(net, input_shape, o);
  return result;
}

// Expects building the one-layer model to fail with a SpecError at `where` (a JSON path such as
// "layers[0].units") whose message contains `message_part`.
inline void check_layer_spec_error(const std::string& json_text, const Shape& input_shape, const std::string& where,
                                   const std::string& message_part) {
  INFO("layer: " << json_text);
  const SpecError e =
      check_spec_error([&] { build_one_layer(json_text, input_shape); }, "layer_test.json", where, {message_part});
  CHECK(std::string(e.what()).find(where) != std::string::npos);
}

}  // namespace tctl::testing
