#include "app/scenarios/sharing_cost.h"

#include <chrono>
#include <cmath>

#include "models/record/prepared_data.h"
#include "models/train/model_builder.h"
#include "models/train/trainer.h"

namespace tctl {

namespace {

struct SharingVariant {
  std::string strategy;
  LockingMode mode;
  int threads;
};

SharingRow train_variant(const TrainConfig& base, const SharingVariant& v) {
  TrainConfig c = base;
  c.optimizer.locking = v.mode;
  c.strategy = StrategyConfig{};
  if (v.strategy == "hogwild") {
    c.strategy.type = StrategyType::kHogwild;
    c.strategy.workers = v.threads;
  } else if (v.strategy == "mirrored") {
    c.strategy.type = StrategyType::kMirrored;
    c.strategy.replicas = v.threads;
  }
  std::unique_ptr<Model> model = build_model(c);
  const PreparedData data = prepare_data(c, model->net());
  Trainer trainer(*model);
  trainer.set_keep_history(false);
  const double counter_before = model->optimizer().iterations();
  std::int64_t steps = 0;
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(data.train, &data.validation, c.epochs, c.batch_size, {},
              [&](std::int64_t, std::int64_t, const MetricValues&) { ++steps; });
  SharingRow r{.strategy = v.strategy, .mode = std::string(locking_mode_name(v.mode)), .threads = v.threads};
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Dataset& scored = data.test.size() > 0 ? data.test : data.validation.size() > 0 ? data.validation : data.train;
  const MetricValues values = trainer.evaluate(scored, c.batch_size);
  r.loss = metric(values, "loss");
  r.metric = c.metrics.empty() ? "loss" : c.metrics.front();
  r.score = metric(values, r.metric);
  r.samples_per_second = static_cast<double>(data.train.size() * c.epochs) / std::max(r.seconds, 1e-9);
  r.steps_per_second = static_cast<double>(steps) / std::max(r.seconds, 1e-9);
  r.applied = std::llround(model->optimizer().iterations() - counter_before);
  r.expected = steps;
  r.staleness = {steps};
  if (v.strategy == "hogwild") {
    const HogwildTotals h = model->hogwild_totals();
    r.expected = h.expected;
    r.applied = h.applied;
    r.staleness = h.staleness;
  }
  r.updates_per_second = static_cast<double>(r.expected) / std::max(r.seconds, 1e-9);
  r.broken = v.mode != LockingMode::kNone && r.applied != r.expected;
  return r;
}

}  // namespace

std::vector<SharingRow> measure_sharing(
    const TrainConfig& config, const std::vector<LockingMode>& modes, int threads,
    const std::function<void(std::size_t, std::size_t, const std::string&)>& progress) {
  std::vector<SharingVariant> variants{{"single", config.optimizer.locking, 1}};
  for (LockingMode m : modes) variants.push_back({"hogwild", m, threads});
  // Mirrored replicas write only their own copies: no lock is needed, and none is taken.
  variants.push_back({"mirrored", LockingMode::kNone, threads});
  std::vector<SharingRow> rows;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const SharingVariant& v = variants[i];
    if (progress) progress(i + 1, variants.size(), v.strategy + ", " + std::string(locking_mode_name(v.mode)));
    rows.push_back(train_variant(config, v));
  }
  return rows;
}

}  // namespace tctl
