// Default graphs and sessions are per thread.
#include <doctest/doctest.h>

#include <thread>

#include "core/session.h"

using namespace tctl;

TEST_CASE("each thread has its own default graph") {
  Graph& mine = default_graph();
  Output x = mine.placeholder("x", DType::kF32, Shape{2});
  (void)x;
  const int nodes_here = mine.size();
  int nodes_there = -1;
  std::uint32_t id_there = 0;
  std::thread t([&] {
    Graph& theirs = default_graph();
    theirs.add("Const", {}, Attrs{{"dtype", std::int64_t{0}}, {"shape", std::vector<std::int64_t>{}}});
    nodes_there = theirs.size();
    id_there = theirs.id();
  });
  t.join();
  CHECK(nodes_there == 1);
  CHECK(id_there != mine.id());
  CHECK(default_graph().size() == nodes_here);
}

TEST_CASE("a thread continuing another's model gets a clear error unless it installs the defaults") {
  auto g = std::make_shared<Graph>();
  Output x, y;
  {
    auto scope = g->as_default();
    x = default_graph().placeholder("x", DType::kF32, Shape{2});
    y = default_graph().add("Relu", {x});
  }
  ThreadPool inter(1), intra(1);
  Session session(g, inter, intra);

  std::string graph_error, session_error;
  float result = 0.0f;
  std::thread without([&] {
    try {
      default_graph().add("Relu", {y});
    } catch (const GraphError& e) {
      graph_error = e.what();
    }
    try {
      default_session();
    } catch (const GraphError& e) {
      session_error = e.what();
    }
  });
  without.join();
  CHECK(graph_error.find("as_default()") != std::string::npos);
  CHECK(session_error.find("session.as_default()") != std::string::npos);

  std::thread with([&] {
    auto graph_scope = g->as_default();
    auto session_scope = session.as_default();
    std::vector<Feed> feeds{{x, Tensor::filled(Shape{2}, -3.0f)}};
    CHECK(&default_graph() == g.get());
    std::vector<Output> relu{y};
    result = default_session().run(feeds, relu)[0].to_floats()[0];
  });
  with.join();
  CHECK(result == 0.0f);
  CHECK(&default_graph() != g.get());  // the guard on the other thread never touched this one
}
