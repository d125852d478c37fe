// Keras models with their weights: tests/keras/keras_files.py writes .keras archives and legacy .h5 files with
// h5py in the layout Keras' saving code writes, with random weights, and PyTorch's predictions with the same
// weights; a train config whose model is such a file, run for 0 epochs, predicts what PyTorch does, and its
// ONNX export what predict does. The six
// Keras test models hold every layer with a Keras mapping (models/nn/layers/layers.def): Dense, Dropout,
// Activation, Conv2D, BatchNormalization, MaxPooling2D, Flatten, Embedding, Bidirectional LSTM, GRU, KerasHub's
// TokenAndPositionEmbedding and TransformerEncoder, GlobalAveragePooling1D (mlp, cnn, text, transformer);
// Conv1D, MaxPooling1D, SimpleRNN, LayerNormalization, AveragePooling1D, GlobalMaxPooling1D (sequence);
// Reshape, AveragePooling2D, GlobalAveragePooling2D, GlobalMaxPooling2D (image). A file that lacks a weight,
// or holds one of another shape, is one line naming the file and the dataset, exit 2.
#include <doctest/doctest.h>

#include "cli/cli_test_util.h"

namespace tctl::cli_test {
namespace {

bool has_h5py(const TempDir& d) {
  return run_shell_command("/usr/bin/python3 -c 'import h5py, numpy'", d.path()).status == 0;
}

// Writes the files for tests/data/keras/<model>_keras3.json into d.
void make_files(const TempDir& d, const std::string& model) {
  const CommandResult r =
      run_shell_command("/usr/bin/python3 " + quoted(source_path("tests/keras/keras_files.py")) + " " +
                            quoted(source_path("tests/data/keras/" + model + "_keras3.json")) + " .",
                        d.path());
  REQUIRE_MESSAGE(r.status == 0, r.out);
}

const char* kKerasConfig = R"({"model": "MODEL", "data": {"x": "x.npy", "y": "y.npy", "standardize": false,
                         "test_split": 0.25, "validation_split": 0}, "epochs": 0})";

std::string keras_config(const std::string& model) {
  std::string c = kKerasConfig;
  return c.replace(c.find("MODEL"), 5, model);
}

// The run's ONNX export gives what predict gives on its test rows (tests/onnx/evaluate_onnx.py).
void check_onnx_export(const TempDir& d) {
  CommandResult e = run_tensorctl("export run --format onnx -o model.onnx", d.path());
  REQUIRE_MESSAGE(e.status == 0, e.err);
  if (run_shell_command("/usr/bin/python3 -c 'import onnx'", d.path()).status != 0) return;
  REQUIRE(run_tensorctl("predict --run run --input run/test.csv --output test_p.csv", d.path()).status == 0);
  const CommandResult c = run_shell_command("/usr/bin/python3 " + quoted(source_path("tests/onnx/evaluate_onnx.py")) +
                                                " model.onnx run/test.csv test_p.csv run/summary.json",
                                            d.path());
  INFO(c.out);
  CHECK(c.status == 0);
  CHECK(c.out.find("max |onnx - predict|") != std::string::npos);
}

// Trains `model_file` for 0 epochs, compares predict on x.npy with PyTorch's reference, when written, and
// checks the run's ONNX export.
void check_against_torch(const TempDir& d, const std::string& model_file) {
  CAPTURE(model_file);
  d.write("c.json", keras_config(model_file));
  CommandResult t = run_tensorctl("train c.json --output run --overwrite", d.path());
  REQUIRE_MESSAGE(t.status == 0, t.err);
  CHECK(t.out.find("for 0 epochs (its starting weights, evaluated and saved)") != std::string::npos);
  REQUIRE(run_tensorctl("predict --run run --input x.npy --output p.csv", d.path()).status == 0);
  if (!std::filesystem::exists(d / "reference.csv")) {
    MESSAGE("no python3-torch: the predictions are not compared with PyTorch's");
    check_onnx_export(d);
    return;
  }
  const CommandResult c = run_shell_command(
      "/usr/bin/python3 " + quoted(source_path("tests/keras/keras_files.py")) + " compare reference.csv p.csv",
      d.path());
  INFO(c.out);
  CHECK(c.status == 0);
  CHECK(c.out.find("max |predict - torch|") != std::string::npos);
  check_onnx_export(d);
}

}  // namespace

TEST_SUITE("keras_weights") {
  TEST_CASE("a .keras and a legacy .h5 file of each test model predict what PyTorch does with their weights") {
    for (const char* model : {"mlp", "cnn", "text", "transformer", "sequence", "image"}) {
      CAPTURE(model);
      TempDir d;
      if (!has_h5py(d)) {
        MESSAGE("/usr/bin/python3 has no h5py (python3-h5py): Keras files are not written here");
        return;
      }
      make_files(d, model);
      check_against_torch(d, "model.keras");
      // KerasHub's layers come in .keras files only.
      if (std::filesystem::exists(d / "model.h5")) check_against_torch(d, "model.h5");
    }
  }

  TEST_CASE("a Keras file's weights start a run that fine-tunes them; summary and import-keras read it too") {
    TempDir d;
    if (!has_h5py(d)) return;
    make_files(d, "text");
    std::string c = keras_config("model.keras");
    c.replace(c.find(R"("epochs": 0)"), 11, R"("epochs": 2)");
    d.write("c.json", c);
    CommandResult t = run_tensorctl("train c.json --quiet --output run", d.path());
    REQUIRE_MESSAGE(t.status == 0, t.err);
    CHECK(read_json(d / "run/summary.json").at("epochs_run") == 2);
    CommandResult s = run_tensorctl("summary model.keras", d.path());
    REQUIRE_MESSAGE(s.status == 0, s.err);
    CHECK(s.out.find("Total params: 5,035") != std::string::npos);
    CommandResult i = run_tensorctl("import-keras model.h5", d.path());
    REQUIRE_MESSAGE(i.status == 0, i.err);
    CHECK(i.err == "converted 4 layers from Keras 3 Sequential 'text_model'\n");
  }

  TEST_CASE("a missing weight, a weight of another shape, an .h5 file without a model: one line, exit 2") {
    TempDir d;
    if (!has_h5py(d)) return;
    make_files(d, "mlp");
    d.write("edit.py",
            "import h5py, shutil, zipfile\n"
            "with zipfile.ZipFile('model.keras') as z: z.extractall('x')\n"
            "with h5py.File('x/model.weights.h5', 'a') as f: del f['layers/dense_1/vars/1']\n"
            "with zipfile.ZipFile('missing.keras', 'w') as z:\n"
            "    for m in ('metadata.json', 'config.json', 'model.weights.h5'): z.write('x/' + m, m)\n"
            "shutil.copy('model.h5', 'shape.h5')\n"
            "with h5py.File('shape.h5', 'a') as f:\n"
            "    del f['model_weights/dense/dense/bias:0']\n"
            "    f['model_weights/dense/dense/bias:0'] = [0.0] * 5\n"
            "with h5py.File('weights_only.h5', 'w') as f: f['x'] = [1.0]\n");
    REQUIRE(run_shell_command("/usr/bin/python3 edit.py", d.path()).status == 0);
    d.write("c.json", keras_config("missing.keras"));
    expect_user_error(d, "train c.json --output run",
                      {"missing.keras (model.weights.h5): layers/dense_1/vars/1: no such dataset"});
    d.write("c.json", keras_config("shape.h5"));
    expect_user_error(d, "train c.json --output run",
                      {"shape.h5: model_weights/dense/dense/bias:0: a weight of shape [5], where the model's "
                       "dense/bias is [16]"});
    d.write("c.json", keras_config("weights_only.h5"));
    expect_user_error(d, "train c.json --output run",
                      {"weights_only.h5: an HDF5 file without a model_config attribute"});
  }
}

}  // namespace tctl::cli_test
