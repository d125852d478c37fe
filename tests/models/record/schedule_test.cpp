#include "models/record/schedule.h"

#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

namespace tctl {
namespace {

ScheduleConfig parse_schedule(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  SpecReader reader(j, "train.json", "optimizer.schedule");
  return ScheduleConfig::parse(reader);
}

TEST_CASE("no schedule keeps the base rate") {
  ScheduleConfig c;
  CHECK(c.constant());
  CHECK(c.rate(0.01, 0) == 0.01);
  CHECK(c.rate(0.01, 123456) == 0.01);
}

TEST_CASE("step: base * gamma^floor(t / step_size)") {
  const ScheduleConfig c = parse_schedule(R"({"type": "step", "step_size": 10, "gamma": 0.5})");
  CHECK(c.rate(0.1, 0) == 0.1);
  CHECK(c.rate(0.1, 9) == 0.1);
  CHECK(c.rate(0.1, 10) == 0.05);
  CHECK(c.rate(0.1, 19) == 0.05);
  CHECK(c.rate(0.1, 20) == 0.025);
  CHECK(parse_schedule(R"({"type": "step", "step_size": 3})").gamma == 0.1);
}

TEST_CASE("exponential: base * rate^(t / decay_steps), staircase floors the exponent") {
  const ScheduleConfig smooth = parse_schedule(R"({"type": "exponential", "decay_steps": 4, "decay_rate": 0.25})");
  CHECK(smooth.rate(1.0, 0) == 1.0);
  CHECK(smooth.rate(1.0, 2) == doctest::Approx(0.5).epsilon(1e-15));
  CHECK(smooth.rate(1.0, 4) == 0.25);
  CHECK(smooth.rate(1.0, 6) == doctest::Approx(0.125).epsilon(1e-15));
  const ScheduleConfig stairs =
      parse_schedule(R"({"type": "exponential", "decay_steps": 4, "decay_rate": 0.25, "staircase": true})");
  CHECK(stairs.rate(1.0, 3) == 1.0);
  CHECK(stairs.rate(1.0, 4) == 0.25);
  CHECK(stairs.rate(1.0, 7) == 0.25);
  CHECK(stairs.rate(1.0, 8) == 0.0625);
}

TEST_CASE("cosine: linear warm-up from 0, then cosine down to alpha * base (Keras' CosineDecay)") {
  const ScheduleConfig c =
      parse_schedule(R"({"type": "cosine", "decay_steps": 100, "alpha": 0.1, "warmup_steps": 10})");
  CHECK(c.rate(0.2, 0) == 0.0);
  CHECK(c.rate(0.2, 5) == doctest::Approx(0.1).epsilon(1e-15));
  CHECK(c.rate(0.2, 10) == doctest::Approx(0.2).epsilon(1e-15));
  // Half way through the decay: (1 - alpha) / 2 + alpha = 0.55 of the base.
  CHECK(c.rate(0.2, 60) == doctest::Approx(0.2 * 0.55).epsilon(1e-12));
  const double quarter = 0.2 * (0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * 0.25)) + 0.1);
  CHECK(c.rate(0.2, 35) == doctest::Approx(quarter).epsilon(1e-12));
  CHECK(c.rate(0.2, 110) == doctest::Approx(0.02).epsilon(1e-12));
  CHECK(c.rate(0.2, 1000) == doctest::Approx(0.02).epsilon(1e-12));
  // Without warm-up it starts at the base rate and ends at 0 by default.
  const ScheduleConfig plain = parse_schedule(R"({"type": "cosine", "decay_steps": 10})");
  CHECK(plain.rate(1.0, 0) == 1.0);
  CHECK(plain.rate(1.0, 5) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(plain.rate(1.0, 10) == doctest::Approx(0.0));
}

}  // namespace
}  // namespace tctl
