#include "models/io/keras_import.h"

#include <doctest/doctest.h>

#include "core/errors.h"
#include "models/io/spec_reader.h"
#include "models/nn/sequential.h"
#include "spec_error_check.h"

namespace tctl {
namespace {

using nlohmann::json;

json keras_file(const std::string& name) {
  return parse_json_file(std::string(TENSORCTL_SOURCE_DIR) + "/tests/data/keras/" + name);
}

// Converting `doc` must fail with a SpecError at `where` whose message contains every part.
void expect_refusal(const json& doc, const std::string& where, const std::vector<std::string>& parts) {
  testing::check_spec_error([&] { keras_to_spec(doc, "m.json", keras_layer_mappings()); }, "m.json", where, parts);
}

// The MLP every mlp_*.json file describes, as our spec.
const json kMlpLayers = json::parse(R"([
  {"type": "Dense", "name": "dense", "units": 16, "activation": "relu", "use_bias": true,
   "kernel_initializer": "he_normal", "bias_initializer": "zeros"},
  {"type": "Dropout", "name": "dropout", "rate": 0.1},
  {"type": "Dense", "name": "dense_1", "units": 8, "activation": "linear", "use_bias": true,
   "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"},
  {"type": "Activation", "name": "activation", "activation": "tanh"},
  {"type": "Dense", "name": "dense_2", "units": 3, "activation": "softmax", "use_bias": true,
   "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"}])");

TEST_SUITE("keras_import") {
  TEST_CASE("the Keras 2 and Keras 3 exports of one MLP convert to the same spec") {
    const json two = keras_to_spec(keras_file("mlp_keras2.json"), "mlp_keras2.json", keras_layer_mappings());
    const json three = keras_to_spec(keras_file("mlp_keras3.json"), "mlp_keras3.json", keras_layer_mappings());
    CHECK(two == three);
    CHECK(two.at("name") == "iris_keras_mlp");
    CHECK(two.at("input_shape") == json::array({4}));
    CHECK(two.at("layers") == kMlpLayers);
  }

  TEST_CASE("an old Keras 2 file with a bare layer list and VarianceScaling initializers converts too") {
    const json spec = keras_to_spec(keras_file("mlp_keras2_legacy.json"), "legacy.json", keras_layer_mappings());
    CHECK(spec.at("name") == "sequential");
    CHECK(spec.at("input_shape") == json::array({4}));
    CHECK(spec.at("layers") == kMlpLayers);
  }

  TEST_CASE("the imported MLP builds, with the parameter count of the Keras summary") {
    // Keras' summary of this model: dense 4*16+16 = 80, dropout 0, dense_1 16*8+8 = 136, activation 0,
    // dense_2 8*3+3 = 27; total 243.
    const json spec = keras_to_spec(keras_file("mlp_keras2.json"), "mlp_keras2.json", keras_layer_mappings());
    Sequential net = Sequential::from_json(spec, "mlp_keras2.json", "", 1);
    CHECK(net.param_count() == 243);
    REQUIRE(net.layers().size() == 5);
    CHECK(net.layers()[0]->param_count() == 80);
    CHECK(net.layers()[2]->param_count() == 136);
    CHECK(net.layers()[4]->param_count() == 27);
    CHECK(net.layers()[2]->name() == "dense_1");
    CHECK(net.output_shape() == Shape{3});
  }

  TEST_CASE("the Keras 2 and Keras 3 exports of one CNN convert to the same spec") {
    const json two = keras_to_spec(keras_file("cnn_keras2.json"), "cnn_keras2.json", keras_layer_mappings());
    const json three = keras_to_spec(keras_file("cnn_keras3.json"), "cnn_keras3.json", keras_layer_mappings());
    CHECK(two == three);
    const json expected = json::parse(R"({"name": "small_cnn", "input_shape": [8, 8, 1], "layers": [
    {"type": "Conv2D", "name": "conv2d", "filters": 4, "kernel_size": [3, 3], "strides": [1, 1], "padding": "same",
     "activation": "relu", "use_bias": true, "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"},
    {"type": "BatchNormalization", "name": "batch_normalization", "axis": -1, "momentum": 0.99, "epsilon": 0.001,
     "center": true, "scale": true},
    {"type": "MaxPooling2D", "name": "max_pooling2d", "pool_size": [2, 2], "strides": [2, 2], "padding": "valid"},
    {"type": "Flatten", "name": "flatten"},
    {"type": "Dense", "name": "dense", "units": 10, "activation": "softmax", "use_bias": true,
     "kernel_initializer": "glorot_uniform", "bias_initializer": "zeros"}]})");
    CHECK(two == expected);
    // It builds, with the parameter count Keras' summary gives: conv 3*3*1*4+4 = 40, batch norm 4*4 = 16 (8 of
    // them the non-trainable moving statistics), dense 4*4*4*10+10 = 650.
    const Sequential net = Sequential::from_json(two, "cnn_keras2.json", "", 1);
    CHECK(net.param_count() == 706);
    CHECK(net.output_shape() == Shape{10});
  }

  TEST_CASE("TensorFlow's image classification tutorial model, Rescaling first, converts from Keras 2 and 3") {
    // Rescaling(1./255), three Conv2D(same, relu) + MaxPooling2D, Flatten, Dense(128, relu), Dense(5), on
    // 180 x 180 x 3 images: the model of tensorflow.org's "Image classification" tutorial.
    const json two = keras_to_spec(keras_file("tutorial_keras2.json"), "tutorial_keras2.json", keras_layer_mappings());
    const json three =
        keras_to_spec(keras_file("tutorial_keras3.json"), "tutorial_keras3.json", keras_layer_mappings());
    CHECK(two.at("layers") == three.at("layers"));
    CHECK(two.at("layers")[0] ==
          json::parse(R"({"type": "Rescaling", "name": "rescaling", "scale": 0.00392156862745098, "offset": 0.0})"));
    // The tutorial's model.summary(): Total params: 3,989,285.
    const Sequential net = Sequential::from_json(two, "tutorial_keras2.json", "", 1);
    CHECK(net.param_count() == 3989285);
    CHECK(net.output_shape() == Shape{5});
    json per_channel = keras_file("tutorial_keras3.json");
    per_channel["config"]["layers"][1]["config"]["scale"] = json::array({0.1, 0.2, 0.3});
    expect_refusal(per_channel, "config.layers[1].config.scale", {"expected a number"});
  }

  TEST_CASE("the Keras 2 and Keras 3 exports of one text model (Embedding, Bidirectional LSTM, GRU) agree") {
    const json two = keras_to_spec(keras_file("text_keras2.json"), "text_keras2.json", keras_layer_mappings());
    const json three = keras_to_spec(keras_file("text_keras3.json"), "text_keras3.json", keras_layer_mappings());
    CHECK(two == three);
    REQUIRE(two.at("layers").size() == 4);
    const json& bidirectional = two.at("layers")[1];
    CHECK(bidirectional.at("merge_mode") == "concat");
    CHECK(bidirectional.at("layer").at("type") == "LSTM");
    CHECK(bidirectional.at("layer").at("return_sequences") == true);
    CHECK(two.at("layers")[2].at("reset_after") == true);
    // Keras' summary: embedding 100 x 8 = 800, two LSTMs of 4 (8 x 16 + 16 x 16 + 16) = 3,200, the GRU
    // 3 (32 x 8 + 8 x 8 + 2 x 8) = 1,008, dense 8 x 3 + 3 = 27.
    const Sequential net = Sequential::from_json(two, "text_keras2.json", "", 1);
    CHECK(net.layers()[1]->param_count() == 3200);
    CHECK(net.layers()[2]->param_count() == 1008);
    CHECK(net.param_count() == 5035);
    CHECK(net.output_shape() == Shape{3});
    // With mask_zero the padding mask goes through the Bidirectional LSTM (every step) to the GRU.
    json doc = keras_file("text_keras3.json");
    doc["config"]["layers"][1]["config"]["mask_zero"] = true;
    const json masked = keras_to_spec(doc, "text_keras3.json", keras_layer_mappings());
    CHECK(masked.at("layers")[0].at("mask_zero") == true);
    CHECK(Sequential::from_json(masked, "text_keras3.json", "", 1).output_shape() == Shape{3});
    // A later Keras 3 saves the forward copy as the wrapped layer, named forward_lstm; Keras loads it as lstm.
    doc = keras_file("text_keras3.json");
    json& wrapped = doc["config"]["layers"][2]["config"]["layer"]["config"];
    REQUIRE(wrapped.at("name") == "lstm");
    wrapped["name"] = "forward_lstm";
    CHECK(keras_to_spec(doc, "text_keras3.json", keras_layer_mappings()) == three);
  }

  TEST_CASE("a KerasHub text transformer imports: its registered classes, mask_zero, KerasHub's counts") {
    const json spec =
        keras_to_spec(keras_file("transformer_keras3.json"), "transformer_keras3.json", keras_layer_mappings());
    REQUIRE(spec.at("layers").size() == 4);
    CHECK(spec.at("layers")[0].at("mask_zero") == true);
    CHECK(spec.at("layers")[1].at("type") == "TransformerEncoder");
    CHECK(spec.at("layers")[1].at("dropout") == 0.1);
    // KerasHub's summary: the embeddings 1000 x 64 + 32 x 64; the encoder 4 (64 x 64 + 64), 2 x 2 x 64,
    // 64 x 128 + 128 and 128 x 64 + 64; dense 64 x 2 + 2.
    const Sequential net = Sequential::from_json(spec, "transformer_keras3.json", "", 1);
    CHECK(net.layers()[0]->param_count() == 66048);
    CHECK(net.layers()[1]->param_count() == 16640 + 256 + 8320 + 8256);
    CHECK(net.output_shape() == Shape{2});
    // A class registered under any other package is a user's, and refused.
    json doc = keras_file("transformer_keras3.json");
    doc["config"]["layers"][2]["registered_name"] = "my_package>TransformerEncoder";
    expect_refusal(doc, "config.layers[2].registered_name", {"custom class"});
  }

  TEST_CASE("KerasHub's layers as Keras saves them: the initializer an object, KerasNLP's Keras 2 names") {
    const json want =
        keras_to_spec(keras_file("transformer_keras3.json"), "transformer_keras3.json", keras_layer_mappings());
    // KerasHub's get_config writes its initializer as the object.
    json doc = keras_file("transformer_keras3.json");
    doc["config"]["layers"][1]["config"]["embeddings_initializer"] = json::parse(
        R"({"module": "keras.initializers", "class_name": "RandomUniform", "config": {"minval": -0.05,
            "maxval": 0.05, "seed": null}, "registered_name": null})");
    CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()) == want);
    doc["config"]["layers"][1]["config"]["embeddings_initializer"]["config"]["maxval"] = 0.5;
    expect_refusal(doc, "config.layers[1].config.embeddings_initializer", {"RandomUniform(-0.05, 0.05)"});
    // Keras 2's saving writes the registered name as the class name, with no registered_name.
    doc = keras_file("transformer_keras3.json");
    for (int i : {1, 2}) {
      json& layer = doc["config"]["layers"][i];
      layer["class_name"] = "keras_nlp>" + layer["class_name"].get<std::string>();
      layer.erase("registered_name");
      layer.erase("module");
    }
    CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()) == want);
    // tie_weights false adds a table Keras counts and saves and this model never reads: refused.
    doc = keras_file("transformer_keras3.json");
    doc["config"]["layers"][1]["config"]["tie_weights"] = false;
    expect_refusal(doc, "config.layers[1].config.tie_weights", {"only true"});
  }

  TEST_CASE("a Bidirectional whose backward layer is not its wrapped layer's mirror is refused") {
    json doc = keras_file("text_keras3.json");
    doc["config"]["layers"][2]["config"]["backward_layer"]["config"]["units"] = 8;
    expect_refusal(doc, "config.layers[2].config.backward_layer", {"wrapped layer run backwards"});
    doc = keras_file("text_keras3.json");
    doc["config"]["layers"][2]["config"]["layer"]["config"]["stateful"] = true;
    expect_refusal(doc, "config.layers[2].config.layer.config.stateful", {"LSTM layer inside Bidirectional"});
    doc = keras_file("text_keras2.json");
    doc["config"]["layers"][3]["config"]["reset_after"] = false;
    expect_refusal(doc, "config.layers[3].config.reset_after", {"only reset_after true"});
  }

  TEST_CASE("a recurrent layer's activations are refused listing only what that layer takes") {
    json doc = keras_file("text_keras2.json");
    doc["config"]["layers"][3]["config"]["recurrent_activation"] = "hard_sigmoid";
    expect_refusal(doc, "config.layers[3].config.recurrent_activation",
                   {"recurrent_activation \"hard_sigmoid\" is not supported (supported: sigmoid)"});
    doc = keras_file("text_keras2.json");
    doc["config"]["layers"][3]["config"]["activation"] = "relu";
    expect_refusal(doc, "config.layers[3].config.activation",
                   {"activation \"relu\" is not supported (supported: tanh)"});
    doc["config"]["layers"][3]["config"]["activation"] = nullptr;
    expect_refusal(doc, "config.layers[3].config.activation",
                   {"activation \"linear\" is not supported (supported: tanh)"});
  }

  TEST_CASE("sizes given as one integer become pairs, and pooling strides default to the pool size") {
    json doc = keras_file("cnn_keras2.json");
    auto& layers = doc["config"]["layers"];
    layers[1]["config"]["kernel_size"] = 5;
    layers[1]["config"]["strides"] = 2;
    layers[3]["class_name"] = "AveragePooling2D";
    layers[3]["config"]["pool_size"] = 3;
    layers[3]["config"]["strides"] = nullptr;
    const json spec = keras_to_spec(doc, "m.json", keras_layer_mappings());
    CHECK(spec["layers"][0]["kernel_size"] == json::array({5, 5}));
    CHECK(spec["layers"][0]["strides"] == json::array({2, 2}));
    CHECK(spec["layers"][2]["type"] == "AveragePooling2D");
    CHECK(spec["layers"][2]["pool_size"] == json::array({3, 3}));
    CHECK(spec["layers"][2]["strides"] == json::array({3, 3}));
  }

  TEST_CASE("a mask reaching a layer Keras 3 gives none ends there with ignore_mask, as Keras drops it") {
    // Keras 3 warns and drops the mask at a layer without supports_masking (Conv1D, Flatten, the poolings but
    // GlobalAveragePooling1D); Dense, Activation, Dropout and LayerNormalization pass it on.
    auto convert = [](const std::vector<std::string>& layers) {
      json doc = json::parse(R"({"class_name": "Sequential", "config": {"name": "m", "layers": [
          {"class_name": "InputLayer", "config": {"batch_shape": [null, 6], "dtype": "int32"}},
          {"class_name": "Embedding", "config": {"name": "embedding", "input_dim": 20, "output_dim": 4,
           "mask_zero": true}}]}})");
      for (const std::string& l : layers) doc["config"]["layers"].push_back(json::parse(l));
      const json spec = keras_to_spec(doc, "m.json", keras_layer_mappings());
      CHECK(Sequential::from_json(spec, "m.json", "", 1).param_count() > 0);
      std::vector<bool> ignores;
      for (const json& layer : spec.at("layers")) ignores.push_back(layer.value("ignore_mask", false));
      return ignores;
    };
    const std::string dense = R"({"class_name": "Dense", "config": {"units": 3}})";
    const std::string conv = R"({"class_name": "Conv1D", "config": {"filters": 2, "kernel_size": 2}})";
    const std::string max_pool = R"({"class_name": "GlobalMaxPooling1D", "config": {}})";
    const std::string lstm = R"({"class_name": "LSTM", "config": {"units": 2, "return_sequences": true}})";
    const std::string flatten = R"({"class_name": "Flatten", "config": {}})";
    CHECK(convert({dense, conv, max_pool, dense}) == std::vector<bool>{false, false, true, false, false});
    CHECK(convert({lstm, max_pool}) == std::vector<bool>{false, false, true});
    CHECK(convert({dense, flatten, dense}) == std::vector<bool>{false, false, true, false});
    CHECK(convert({R"({"class_name": "GlobalAveragePooling1D", "config": {}})", dense}) ==
          std::vector<bool>{false, false, false});
    // BatchNormalization takes its training moments over the kept steps and passes the mask on, as Keras'.
    const std::string batch_norm = R"({"class_name": "BatchNormalization", "config": {"name": "bn"}})";
    CHECK(convert({batch_norm, lstm, max_pool}) == std::vector<bool>{false, false, false, true});
    // Without a mask no layer has the key.
    const json spec = keras_to_spec(keras_file("sequence_keras3.json"), "sequence_keras3.json", keras_layer_mappings());
    for (const json& layer : spec.at("layers")) CHECK_FALSE(layer.contains("ignore_mask"));
  }

  TEST_CASE("Reshape keeps its target shape, and a later BatchNormalization's last axis follows it") {
    json doc = keras_file("cnn_keras2.json");
    auto& layers = doc["config"]["layers"];
    layers[4] =
        json::parse(R"({"class_name": "Reshape", "config": {"name": "reshape", "trainable": true, "dtype": "float32",
                                                                  "target_shape": [16, 4]}})");
    layers.insert(layers.begin() + 5,
                  json::parse(R"({"class_name": "BatchNormalization", "config": {"name": "bn2", "axis": [2]}})"));
    layers[2]["config"]["renorm"] = false;
    layers[2]["config"]["renorm_momentum"] = 0.99;
    const json spec = keras_to_spec(doc, "m.json", keras_layer_mappings());
    CHECK(spec["layers"][3] == json::parse(R"({"type": "Reshape", "name": "reshape", "target_shape": [16, 4]})"));
    CHECK(spec["layers"][4]["axis"] == -1);
  }

  TEST_CASE("layers without an InputLayer take the shape from a Keras 3 build_config or the model") {
    json doc = keras_file("mlp_keras3.json");
    doc["config"]["layers"].erase(0);
    CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()).at("input_shape") == json::array({4}));
    doc["config"]["layers"][0].erase("build_config");
    CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()).at("input_shape") == json::array({4}));
    doc["config"].erase("build_input_shape");
    CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()).at("input_shape") == json::array({4}));
    doc.erase("build_config");
    expect_refusal(doc, "config.layers", {"no input shape"});
  }

  TEST_CASE("a layer class we do not have is refused by name") {
    expect_refusal(keras_file("timedistributed_keras2.json"), "config.layers[1]",
                   {"layer type TimeDistributed (\"time_distributed\") is not supported",
                    "supported: Activation, AveragePooling1D, AveragePooling2D"});
  }

  TEST_CASE("an option that changes the maths is refused, naming the layer and the option") {
    expect_refusal(keras_file("regularizer_keras3.json"), "config.layers[1].config.kernel_regularizer",
                   {"Dense layer \"hidden\"", "kernel_regularizer is not supported", "got L2"});

    struct Case {
      int layer;
      std::string key;
      json value;
      std::vector<std::string> parts;
    };
    const std::vector<Case> cnn_cases{
        {1, "dilation_rate", json::array({2, 2}), {"Conv2D layer \"conv2d\"", "dilation_rate [2,2] is not supported"}},
        {1, "groups", 2, {"groups 2 is not supported"}},
        {1, "data_format", "channels_first", {"data_format \"channels_first\" is not supported"}},
        {1,
         "activity_regularizer",
         json::parse(R"({"class_name": "L1", "config": {"l1": 0.1}})"),
         {"activity_regularizer", "got L1"}},
        {1,
         "kernel_constraint",
         json::parse(R"({"class_name": "MaxNorm", "config": {}})"),
         {"kernel_constraint", "got MaxNorm"}},
        {1, "activation", "swish", {"activation \"swish\" is not supported", "leaky_relu"}},
        {1,
         "activation",
         json::parse(R"({"class_name": "relu"})"),
         {"needs the function's name as a string in \"config\"", "got relu with no config"}},
        {1,
         "activation",
         json::parse(R"({"class_name": "ReLU", "config": {"max_value": 6.0}})"),
         {"needs the function's name", "got ReLU with an object as its config"}},
        {1, "activation", 5, {"an activation is a function's name (elu,", "got 5"}},
        {1,
         "kernel_initializer",
         json::parse(R"({"class_name": "RandomNormal", "config": {"mean": 0.0}})"),
         {"initializer RandomNormal is not supported", "GlorotUniform"}},
        {1, "padding", "causal", {"padding \"causal\" is not supported"}},
        {1, "trainable", false, {"trainable false is not supported"}},
        {1, "dtype", "float64", {"dtype \"float64\" is not supported"}},
        {2,
         "axis",
         json::array({1}),
         {"BatchNormalization layer \"batch_normalization\"", "axis [1] is not supported"}},
        {2, "gamma_initializer", "zeros", {"initializer zeros is not supported here"}},
        {2, "synchronized", true, {"synchronized is not supported"}},
        {2, "renorm", true, {"renorm is not supported (only false)"}},
        {3, "data_format", "channels_first", {"MaxPooling2D layer", "data_format"}},
        {5, "lora_rank", 4, {"option lora_rank is not supported", "got 4"}},
    };
    for (const auto& c : cnn_cases) {
      CAPTURE(c.key);
      json doc = keras_file("cnn_keras2.json");
      doc["config"]["layers"][c.layer]["config"][c.key] = c.value;
      expect_refusal(doc, "config.layers[" + std::to_string(c.layer) + "].config." + c.key, c.parts);
    }

    json doc = keras_file("mlp_keras2.json");
    doc["config"]["layers"][2]["config"]["seed"] = 3;
    expect_refusal(doc, "config.layers[2].config.seed",
                   {"Dropout layer \"dropout\"", "seed is not supported (only null)"});
    for (const double rate : {1.0, -0.1}) {  // Keras accepts 1, which drops every unit; our Dropout does not
      CAPTURE(rate);
      doc = keras_file("mlp_keras2.json");
      doc["config"]["layers"][2]["config"]["rate"] = rate;
      expect_refusal(doc, "config.layers[2].config.rate", {"Dropout layer \"dropout\"", "expected a number in [0, 1)"});
    }
    doc = keras_file("mlp_keras3.json");
    doc["config"]["layers"][1]["config"]["dtype"]["config"]["name"] = "float16";
    expect_refusal(doc, "config.layers[1].config.dtype",
                   {"dtype \"float16\" is not supported", "a mixed_bfloat16 or mixed_float16 policy is taken"});
    // A mixed policy keeps the weights in float32: the layer imports as a float32 one does.
    for (const char* policy : {"mixed_float16", "mixed_bfloat16"}) {
      doc = keras_file("mlp_keras3.json");
      doc["config"]["layers"][1]["config"]["dtype"]["config"]["name"] = policy;
      CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()).at("layers") == kMlpLayers);
      doc["config"]["layers"][1]["config"]["dtype"] = policy;
      CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()).at("layers") == kMlpLayers);
    }
  }

  TEST_CASE("unknown keys are accepted only when null") {
    json doc = keras_file("mlp_keras3.json");
    doc["config"]["layers"][1]["config"]["quantization_config"] = nullptr;
    CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()).at("layers") == kMlpLayers);
  }

  TEST_CASE("input shapes must be fixed") {
    json doc = keras_file("mlp_keras2.json");
    doc["config"]["layers"][0]["config"]["batch_input_shape"] = json::array({nullptr, nullptr});
    expect_refusal(doc, "config.layers[0].config.batch_input_shape[1]", {"None", "fixed size"});
  }

  TEST_CASE("a file that is not a Sequential model is refused") {
    expect_refusal(keras_file("functional_keras2.json"), "class_name",
                   {"Keras Functional model", "only Sequential models"});
    expect_refusal(json::parse(R"({"class_name": "MyModel", "config": {}})"), "class_name",
                   {"\"MyModel\" is not a Keras Sequential model"});
    expect_refusal(json::parse(R"({"class_name": "Sequential"})"), "config", {"missing"});
    expect_refusal(json::parse(R"({"class_name": "Sequential", "config": {"layers": 3}})"), "config.layers",
                   {"expected the list of layers"});
    expect_refusal(json::parse(R"({"class_name": "Sequential", "config": {"layers": []}})"), "config.layers",
                   {"no layers"});
    expect_refusal(json::parse(R"({"class_name": "Sequential", "config": {"layers": [7]}})"), "config.layers[0]",
                   {"expected a Keras layer"});
    expect_refusal(json::parse(R"({"module": "keras", "class_name": "Sequential", "config": {"layers": [
                   {"module": "my_project.layers", "class_name": "Dense", "config": {}}]}})"),
                   "config.layers[0].module", {"custom layers are not supported"});
  }

  // A registered subclass of Dense, with Dense's class_name and module, was imported as a plain Dense.
  TEST_CASE("a Keras 3 class registered as custom (\"Custom>Dense\") is refused, naming the layer") {
    json doc = keras_file("mlp_keras3.json");
    doc["config"]["layers"][1]["registered_name"] = "Custom>Dense";
    expect_refusal(doc, "config.layers[1].registered_name",
                   {"Dense layer \"dense\": registered as the custom class \"Custom>Dense\"; custom layers are not "
                    "supported"});
    doc["config"]["layers"][1]["registered_name"] = 7;
    expect_refusal(doc, "config.layers[1].registered_name", {"registered as the custom class 7"});
    doc = keras_file("mlp_keras3.json");
    doc["registered_name"] = "Custom>MySequential";
    expect_refusal(doc, "registered_name", {"Sequential model: registered as the custom class", "custom models"});
    // Keras' own classes have null, or their own name where a class is not exported.
    doc["registered_name"] = "Sequential";
    doc["config"]["layers"][1]["registered_name"] = "Dense";
    CHECK(keras_to_spec(doc, "m.json", keras_layer_mappings()).at("layers") == kMlpLayers);
  }

  TEST_CASE("any odd value in any layer option is converted or refused as a SpecError, never another exception") {
    const std::vector<json> odd_values{
        -1,
        0,
        2,
        1e300,
        "x",
        true,
        json::object(),
        json::array(),
        json::array({1}),
        json::array({nullptr, "a"}),
        json::parse(R"({"class_name": 3})"),
        json::parse(R"({"class_name": "X", "config": 5, "items": 7})"),
        json::parse(R"({"config": {"name": 5, "mode": 1, "scale": "s"}, "class_name": "VarianceScaling"})"),
        json(std::uint64_t{18446744073709551615ULL})};
    int refused = 0;
    for (const char* file : {"mlp_keras2.json", "mlp_keras3.json", "cnn_keras2.json", "cnn_keras3.json"}) {
      const json original = keras_file(file);
      for (std::size_t i = 0; i < original["config"]["layers"].size(); ++i) {
        for (const auto& [key, unused] : original["config"]["layers"][i]["config"].items()) {
          for (const auto& value : odd_values) {
            json doc = original;
            doc["config"]["layers"][i]["config"][key] = value;
            CAPTURE(file);
            CAPTURE(i);
            CAPTURE(key);
            CAPTURE(value.dump());
            try {
              keras_to_spec(doc, "m.json", keras_layer_mappings());
            } catch (const SpecError&) {
              ++refused;
            } catch (const std::exception& e) {
              FAIL("not a SpecError: " << e.what());
            }
          }
        }
      }
    }
    CHECK(refused > 500);
  }

  TEST_CASE("Keras files are told apart from tensorctl specs, and their writer is named") {
    CHECK(is_keras_model_json(keras_file("mlp_keras2.json")));
    CHECK(is_keras_model_json(keras_file("functional_keras2.json")));
    CHECK_FALSE(is_keras_model_json(json::parse(R"({"name": "m", "input_shape": [4], "layers": []})")));
    CHECK_FALSE(is_keras_model_json(json::array()));
    CHECK(keras_source_description(keras_file("mlp_keras2.json")) == "Keras 2 (keras 2.10.0, tensorflow backend)");
    CHECK(keras_source_description(keras_file("mlp_keras2_legacy.json")) ==
          "Keras 2 (keras 2.1.6, tensorflow backend, legacy layer list)");
    CHECK(keras_source_description(keras_file("mlp_keras3.json")) == "Keras 3");
  }

}  // TEST_SUITE

}  // namespace
}  // namespace tctl
