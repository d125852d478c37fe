// Callbacks against Keras' semantics, epoch by epoch, and their state across a checkpoint.
#include "models/train/callbacks.h"

#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <limits>

namespace tctl {
namespace {

struct Harness {
  std::shared_ptr<Sequential> net = std::make_shared<Sequential>(Sequential::from_json(
      nlohmann::json::parse(
          R"({"input_shape": [2], "layers": [{"type": "Dense", "units": 2, "activation": "softmax"}]})"),
      "model.json", "", 1));
  ModelOptions options;
  Model model{net, options};
  Trainer trainer{model};
  double lr = 1.0;
  LearningRateControl control{[this] { return lr; }, [this](double f) { lr *= f; }};

  Callbacks make(const std::string& json) {
    std::vector<CallbackConfig> configs =
        parse_callbacks(nlohmann::json::parse(json), "train.json", {"accuracy"}, true);
    return Callbacks(configs, trainer, std::filesystem::temp_directory_path(), control);
  }
};

EpochResult epoch(std::int64_t n, double val_loss) {
  EpochResult r;
  r.epoch = n;
  r.train = {{"loss", 1.0}};
  r.validation = {{"loss", val_loss}};
  return r;
}

const char* kReduce = R"([{"type": "ReduceLROnPlateau", "monitor": "val_loss", "factor": 0.5, "patience": 2,
                          "cooldown": 1, "min_lr": 0.2, "min_delta": 0}])";

// Keras 3's ReduceLROnPlateau.on_epoch_end on val_loss 1.0 for ten epochs, rate 1.0, factor 0.5, patience 2,
// cooldown 1, min_lr 0.2, worked by hand: lowered at epochs 3 and 5 (the epoch ending a cooldown counts),
// clipped to min_lr at 7, then left alone.
const std::vector<double> kKerasRates{1, 1, 0.5, 0.5, 0.25, 0.25, 0.2, 0.2, 0.2, 0.2};

}  // namespace

TEST_CASE("ReduceLROnPlateau lowers the rate as Keras does, with cooldown and min_lr") {
  Harness h;
  Callbacks callbacks = h.make(kReduce);
  std::vector<double> rates;
  for (std::int64_t e = 1; e <= 10; ++e) {
    callbacks.on_epoch_end(epoch(e, 1.0));
    rates.push_back(h.lr);
  }
  CHECK(rates == kKerasRates);
  // An improvement resets the wait: two more flat epochs are needed before the next cut.
  Harness g;
  Callbacks again = g.make(kReduce);
  for (double v : {1.0, 1.0, 0.5, 0.5}) again.on_epoch_end(epoch(1, v));
  CHECK(g.lr == 1.0);
}

TEST_CASE("callback state survives a checkpoint: a resumed run lowers the rate and stops where an unbroken one does") {
  const std::string both = R"([{"type": "ReduceLROnPlateau", "monitor": "val_loss", "factor": 0.5, "patience": 2,
      "cooldown": 2, "min_lr": 0.1}, {"type": "EarlyStopping", "monitor": "val_loss", "patience": 9}])";
  const std::vector<double> losses{1.0, 0.9, 0.9, 0.9, 0.95, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9};
  Harness straight;
  Callbacks unbroken = straight.make(both);
  std::vector<std::vector<std::string>> lines;
  for (std::size_t e = 0; e < losses.size(); ++e)
    lines.push_back(unbroken.on_epoch_end(epoch(static_cast<std::int64_t>(e) + 1, losses[e])));

  for (std::size_t cut = 1; cut < losses.size(); ++cut) {
    CAPTURE(cut);
    Harness first;
    Callbacks before = first.make(both);
    for (std::size_t e = 0; e < cut; ++e) before.on_epoch_end(epoch(static_cast<std::int64_t>(e) + 1, losses[e]));
    const nlohmann::json state = before.state();
    Harness second;
    second.lr = first.lr;  // the optimizer's rate travels in the checkpoint with the weights
    Callbacks after = second.make(both);
    after.restore_state(state);
    after.restore_tensors(SafetensorsFile{});
    for (std::size_t e = cut; e < losses.size(); ++e)
      CHECK(after.on_epoch_end(epoch(static_cast<std::int64_t>(e) + 1, losses[e])) == lines[e]);
    CHECK(second.lr == straight.lr);
  }
}

TEST_CASE("EarlyStopping stops at the first epoch where the wait reaches patience, as Keras does") {
  Harness h;
  Callbacks callbacks = h.make(R"([{"type": "EarlyStopping", "monitor": "val_loss", "patience": 2}])");
  CHECK(callbacks.on_epoch_end(epoch(1, 1.0)).empty());
  CHECK(callbacks.on_epoch_end(epoch(2, 1.0)).empty());                          // wait 1
  const std::vector<std::string> lines = callbacks.on_epoch_end(epoch(3, 1.0));  // wait 2 >= patience 2
  REQUIRE(lines.size() == 1);
  CHECK(lines[0] == "EarlyStopping: val_loss has not improved for 2 epochs (best 1 at epoch 1); stopping");
}

TEST_CASE("EarlyStopping counts a change of less than min_delta as none, rising or falling") {
  // val_accuracy rises (auto mode maximizes it) and val_loss falls, each by less than min_delta 0.01.
  for (const std::string monitor : {"val_accuracy", "val_loss"}) {
    CAPTURE(monitor);
    const bool rises = monitor == "val_accuracy";
    Harness h;
    Callbacks callbacks =
        h.make(R"([{"type": "EarlyStopping", "monitor": ")" + monitor + R"(", "patience": 1, "min_delta": 0.01}])");
    auto result = [&](std::int64_t n, double value) {
      EpochResult r = epoch(n, rises ? 1.0 : value);
      r.validation.emplace_back("accuracy", rises ? value : 0.5);
      return r;
    };
    CHECK(callbacks.on_epoch_end(result(1, 0.5)).empty());
    const std::vector<std::string> lines = callbacks.on_epoch_end(result(2, rises ? 0.505 : 0.495));
    REQUIRE(lines.size() == 1);
    CHECK(lines[0] ==
          std::string("EarlyStopping: ") + monitor + " has not improved for 1 epoch (best 0.5 at epoch 1); stopping");
  }
}

TEST_CASE("EarlyStopping never stops after the first epoch, even with patience 0 and a NaN loss") {
  // Keras: `if self.wait >= self.patience and epoch > 0`, so the first epoch (0 in Keras, 1 here) never stops.
  Harness h;
  Callbacks callbacks = h.make(R"([{"type": "EarlyStopping", "monitor": "val_loss", "patience": 0}])");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(callbacks.on_epoch_end(epoch(1, nan)).empty());
  const std::vector<std::string> lines = callbacks.on_epoch_end(epoch(2, nan));
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("EarlyStopping: val_loss has not improved for 2 epochs", 0) == 0);
}

TEST_CASE("EarlyStopping with restore_best_weights holds the first epoch's weights until an epoch improves") {
  // Keras: `if self.restore_best_weights and self.best_weights is None: self.best_weights = get_weights()`.
  // A NaN first epoch is no improvement, yet its weights are the best ones held, so a checkpoint written after
  // it has the best/ tensors it is checked against, and the end of training puts them back.
  Harness h;
  Callbacks callbacks = h.make(R"([{"type": "EarlyStopping", "monitor": "val_loss", "patience": 5,
                                    "restore_best_weights": true}])");
  const std::vector<NamedTensor> first = variable_values(h.net->variables());
  callbacks.on_epoch_end(epoch(1, std::numeric_limits<double>::quiet_NaN()));
  const std::vector<NamedTensor> held = callbacks.tensors();
  REQUIRE(held.size() == callbacks.expected_tensors().size());
  REQUIRE(held.size() == first.size());
  for (const auto& v : h.net->variables()) v->assign(Tensor::filled(v->shape(), 7.0f));
  callbacks.on_epoch_end(epoch(2, std::numeric_limits<double>::quiet_NaN()));
  CHECK(callbacks.on_train_end() == "EarlyStopping: restored the weights of epoch 1");
  const std::vector<NamedTensor> restored = variable_values(h.net->variables());
  for (std::size_t i = 0; i < first.size(); ++i) {
    CAPTURE(first[i].name);
    CHECK(held[i].name == "best/" + first[i].name);
    REQUIRE(restored[i].value.num_elements() == first[i].value.num_elements());
    CHECK(std::memcmp(restored[i].value.data<float>(), first[i].value.data<float>(),
                      sizeof(float) * static_cast<std::size_t>(first[i].value.num_elements())) == 0);
  }
}

}  // namespace tctl
