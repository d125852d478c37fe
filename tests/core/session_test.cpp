#include <doctest/doctest.h>

#include <atomic>
#include <limits>
#include <thread>
#include <utility>

#include "core/autodiff.h"
#include "core/session.h"
#include "core/thread_pool.h"

using namespace tctl;

TEST_CASE("Session::run from many threads at once gives each caller its own results") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{-1, 8});
  auto w = std::make_shared<Variable>("w", Tensor::filled(Shape{8, 4}, 0.5f));
  Output y = g->add("Relu", {g->add("MatMul", {x, g->read(w)})});
  ThreadPool inter(2), intra(2);
  Session s(g, inter, intra);
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const float v = static_cast<float>(t + 1);
        std::vector<Feed> feeds{{x, Tensor::filled(Shape{t + 1, 8}, v)}};
        std::vector<Output> fetch{y};
        Tensor out = s.run(feeds, fetch)[0];
        if (!(out.shape() == Shape{t + 1, 4}) || out.to_floats()[0] != v * 4.0f) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  CHECK(wrong == 0);
}

TEST_CASE("steady-state runs reuse their buffers") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{-1, 16});
  auto w = std::make_shared<Variable>("w", Tensor::filled(Shape{16, 16}, 0.01f));
  Output h = g->add("Tanh", {g->add("MatMul", {x, g->read(w)})});
  Output loss = g->add("Mean", {h});
  std::vector<Output> reads{Output{g->node(g->node(h).inputs[0]).inputs[1]}};
  Output dw = gradients(*g, loss, reads)[0];
  Output update = g->add("ApplySgd", {dw, g->scalar(0.1f)}, {}, {{w, true}});
  add_auto_control_dependencies(*g);
  ThreadPool inter(2), intra(1);
  Session s(g, inter, intra);
  Tensor batch = Tensor::filled(Shape{32, 16}, 1.0f);
  std::vector<Feed> feeds{{x, batch}};
  std::vector<Output> fetch{loss}, targets{update};
  for (int i = 0; i < 3; ++i) s.run(feeds, fetch, targets);
  const auto before = Buffer::allocation_count();
  for (int i = 0; i < 20; ++i) s.run(feeds, fetch, targets);
  CHECK(Buffer::allocation_count() == before);
}

TEST_CASE("a plan that writes no variable keeps its reads between runs and sees every write") {
  for (LockingMode mode : {LockingMode::kMutex, LockingMode::kProcess, LockingMode::kSnapshot, LockingMode::kAtomic,
                           LockingMode::kNone, LockingMode::kDataflow}) {
    CAPTURE(locking_mode_name(mode));
    auto g = std::make_shared<Graph>();
    Output x = g->placeholder("x", DType::kF32, Shape{-1, 2});
    auto w = std::make_shared<Variable>("w", Tensor::filled(Shape{2, 2}, 1.0f), mode);
    Output y = g->add("MatMul", {x, g->read(w)});
    ThreadPool inter(1), intra(1);
    Session s(g, inter, intra);
    const std::vector<Feed> feeds{{x, Tensor::filled(Shape{1, 2}, 1.0f)}};
    const std::vector<Output> fetch{y};
    auto first = [&] { return s.run(feeds, fetch)[0].to_floats()[0]; };
    CHECK(first() == 2.0f);
    CHECK(first() == 2.0f);
    const bool snapshots = !w->lock_free();
    if (mode == LockingMode::kMutex || mode == LockingMode::kProcess) {
      // The frame holds the buffer it read (the variable, the frame and this handle)...
      CHECK(w->read().use_count() == 3);
    }
    // ...so a write between runs copies it, and the next run reads the new value.
    w->assign(Tensor::filled(Shape{2, 2}, 3.0f));
    CHECK(first() == 6.0f);
    w->assign_add(Tensor::filled(Shape{2, 2}, 1.0f));
    CHECK(first() == 8.0f);
    if (snapshots) CHECK(w->writes() == 2);
  }
}

TEST_CASE("kept reads stay whole and never go back while another thread writes") {
  for (LockingMode mode : {LockingMode::kMutex, LockingMode::kSnapshot}) {
    CAPTURE(locking_mode_name(mode));
    auto g = std::make_shared<Graph>();
    auto w = std::make_shared<Variable>("w", Tensor::filled(Shape{64}, 0.0f), mode);
    Output y = g->add("Relu", {g->read(w)});
    ThreadPool inter(1), intra(1);
    Session s(g, inter, intra);
    std::atomic<bool> stop{false};
    std::atomic<int> torn{0}, backwards{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 2; ++t) {
      readers.emplace_back([&] {
        const std::vector<Output> fetch{y};
        float last = 0.0f;
        while (!stop.load()) {
          const std::vector<float> v = s.run({}, fetch)[0].to_floats();
          for (float e : v) torn.fetch_add(e != v[0] ? 1 : 0);
          if (v[0] < last) backwards.fetch_add(1);
          last = v[0];
        }
      });
    }
    for (int k = 1; k <= 300; ++k) w->assign(Tensor::filled(Shape{64}, static_cast<float>(k)));
    stop = true;
    for (auto& t : readers) t.join();
    CHECK(torn == 0);
    CHECK(backwards == 0);
    // After the last write every run sees it.
    const std::vector<Output> fetch{y};
    CHECK(s.run({}, fetch)[0].to_floats()[0] == 300.0f);
  }
}

TEST_CASE("a plan that writes a variable lets go of its reads after use") {
  auto g = std::make_shared<Graph>();
  auto w = std::make_shared<Variable>("w", Tensor::filled(Shape{4}, 1.0f));
  auto lr = std::make_shared<Variable>("lr", Tensor::scalar(0.5f));
  Output update = g->add("ApplySgd", {g->read(w), g->read(lr)}, {}, {{w, true}});
  add_auto_control_dependencies(*g);
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  const std::vector<Output> targets{update};
  s.run({}, {}, targets);
  // Neither read is held: the update wrote in place, and lr may be set between steps without a copy.
  CHECK(w->read().use_count() == 2);
  CHECK(lr->read().use_count() == 2);
  CHECK(w->read().to_floats()[0] == 0.5f);
}

TEST_CASE("placement falls back to the CPU with a warning, or refuses in strict mode") {
  auto g = std::make_shared<Graph>();
  Output x = g->placeholder("x", DType::kF32, Shape{2});
  Output y;
  {
    Graph::Scope scope(*g, "dense", "cuda:7", Phase::kForward);
    y = g->add("Relu", {x});
  }
  ThreadPool inter(1), intra(1);
  Session s(g, inter, intra);
  std::vector<Feed> feeds{{x, Tensor::filled(Shape{2}, -1.0f)}};
  std::vector<Output> fetch{y};
  CHECK(s.run(feeds, fetch)[0].to_floats() == std::vector<float>{0, 0});
  REQUIRE(s.placement_warnings().size() == 1);
  CHECK(s.placement_warnings()[0].find("dense/Relu") != std::string::npos);
  SessionOptions strict;
  strict.placement.strict = true;
  Session s2(g, inter, intra, strict);
  CHECK_THROWS_AS(s2.run(feeds, fetch), PlacementError);
}

TEST_CASE("kernels flush denormal results to zero unless flushing is switched off, on every thread") {
  // 2^-126 is the smallest normal float; half of it is denormal.
  const float smallest_normal = std::numeric_limits<float>::min();
  auto run_half = [&](int threads) {
    auto g = std::make_shared<Graph>();
    Output x = g->placeholder("x", DType::kF32, Shape{-1});
    Output y = g->add("Scale", {x}, Attrs{{"factor", 0.5}});
    ThreadPool inter(threads), intra(threads);
    Session s(g, inter, intra);
    std::vector<Feed> feeds{{x, Tensor::filled(Shape{64 * 1024}, smallest_normal)}};
    std::vector<Output> fetch{y};
    const std::vector<float> out = s.run(feeds, fetch)[0].to_floats();
    return std::pair{out.front(), out.back()};
  };
  const bool caller_before = set_flush_denormals(false);
  for (int threads : {1, 2}) {
    CAPTURE(threads);
    CHECK(run_half(threads) == std::pair{0.0f, 0.0f});
    set_denormal_flushing(false);
    CHECK(run_half(threads) == std::pair{smallest_normal / 2, smallest_normal / 2});
    set_denormal_flushing(true);
  }
  // The caller's own setting is restored after each run.
  CHECK_FALSE(set_flush_denormals(caller_before));
}
