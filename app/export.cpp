// tensorctl export RUN_DIR --format onnx -o FILE [--weights FILE]: a trained run as an ONNX model that takes
// the raw rows `predict` takes and gives what `predict` writes (models/io/onnx_export.h).
#include <cstdio>

#include "app/commands.h"
#include "app/flag_checks.h"
#include "core/errors.h"
#include "models/io/atomic_file.h"
#include "models/io/onnx_export.h"
#include "models/run/loaded_run.h"
#include "models/run/output_check.h"

namespace tctl::app {

namespace {
struct ExportFlags {
  std::string run;
  std::string format = "onnx";
  std::string output;
  std::string weights;
};

int run_export(const ExportFlags& f) {
  if (f.format != "onnx") throw SpecError("", "--format", "unknown format \"" + f.format + "\" (known: onnx)");
  check_output_path(f.output, "-o");
  LoadedRun run = load_run(f.run, 1, 1, f.weights);
  check_output_keeps_inputs(f.output, "-o");
  const Sequential& net = run.model->net();
  OnnxExportInput in;
  in.name = net.name();
  in.input_shape.assign(net.input_shape().dims().begin(), net.input_shape().dims().end());
  in.add_network = [&net](OnnxWriter& w, const std::string& x) { return net.to_onnx(w, x); };
  if (run.standardized) {
    in.mean = run.standardizer.mean;
    in.std = run.standardizer.std;
  }
  in.outputs = net.output_shape().num_elements();
  in.output_name = run.num_classes > 0 ? "probabilities" : "values";
  in.producer_version = TENSORCTL_VERSION;
  const std::string bytes = export_onnx(in);
  write_file_atomic(f.output, bytes);
  if (f.output != "-")
    std::fprintf(stderr, "wrote %s (ONNX opset 17, input [batch, %lld] -> %s [batch, %lld], %zu bytes)\n",
                 printable_line(f.output).c_str(), static_cast<long long>(run.feature_names.size()),
                 in.output_name.c_str(), static_cast<long long>(in.outputs), bytes.size());
  return 0;
}

void define_flags(CLI::App& cmd, ExportFlags& flags) {
  cmd.add_option("run", flags.run, "Run directory written by train")->required()->check(non_empty("a run directory"));
  cmd.add_option("--format", flags.format, "onnx");
  cmd.add_option("-o,--output", flags.output, "The file to write (- for stdout)")->required();
  cmd.add_option("--weights", flags.weights,
                 "Weights file of the run to export, relative to it (default weights.safetensors)")
      ->check(non_empty("a weights file of the run"));
}

}  // namespace

Command add_export_command(CLI::App& app) {
  return add_command<ExportFlags>(app, "export", "Export a trained run as an ONNX model", define_flags, run_export);
}

}  // namespace tctl::app
