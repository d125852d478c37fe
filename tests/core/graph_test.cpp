#include <doctest/doctest.h>

#include "core/errors.h"
#include "core/graph.h"

using namespace tctl;

TEST_CASE("nodes get unique names within their layer scope, and devices from the scope") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4});
  Output a, b;
  {
    Graph::Scope s(g, "dense", "cuda:0", Phase::kForward);
    a = g.add("Relu", {x});
    b = g.add("Relu", {a});
  }
  CHECK(g.node(a).name == "dense/Relu");
  CHECK(g.node(b).name == "dense/Relu_1");
  CHECK(g.node(a).layer == "dense");
  CHECK(g.node(a).device == "cuda:0");
  Output c = g.add("Relu", {b});
  CHECK(g.node(c).device == "cpu");
  CHECK(g.node(c).layer.empty());
}

TEST_CASE("shape inference runs as nodes are added and keeps the unknown batch") {
  Graph g;
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4});
  auto w = std::make_shared<Variable>("w", Tensor::zeros(DType::kF32, Shape{4, 3}));
  Output y = g.add("MatMul", {x, g.read(w)});
  CHECK(g.spec(y).shape == Shape{-1, 3});
  CHECK(g.node(g.node(y).inputs[1]).vars[0].var == w);
}

TEST_CASE("a shape error names the node and both shapes") {
  Graph g;
  Graph::Scope s(g, "dense_2", "cpu", Phase::kForward);
  Output x = g.placeholder("x", DType::kF32, Shape{-1, 4});
  Output b = g.constant(Tensor::zeros(DType::kF32, Shape{5}));
  try {
    g.add("BiasAdd", {x, b});
    FAIL("expected ShapeError");
  } catch (const ShapeError& e) {
    std::string m = e.what();
    CHECK(m.find("dense_2/BiasAdd") != std::string::npos);
    CHECK(m.find("[5]") != std::string::npos);
    CHECK(m.find("[?, 4]") != std::string::npos);
  }
}

TEST_CASE("SpecError formats file, place and message as one line") {
  SpecError e("configs/iris_mlp.json", "layers[2].units", "expected a positive integer, got -3");
  CHECK(std::string(e.what()) == "configs/iris_mlp.json: layers[2].units: expected a positive integer, got -3");
  CHECK(e.where() == "layers[2].units");
}
