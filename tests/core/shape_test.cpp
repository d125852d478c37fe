#include <doctest/doctest.h>

#include "core/shape.h"

using namespace tctl;

TEST_CASE("shape basics") {
  Shape s{-1, 8, 8, 1};
  CHECK(s.rank() == 4);
  CHECK_FALSE(s.fully_known());
  CHECK(s.with_batch(32).num_elements() == 32 * 64);
  CHECK(s.without_batch() == Shape{8, 8, 1});
  CHECK(Shape::concat(-1, Shape{64}) == Shape{-1, 64});
  CHECK(Shape{}.num_elements() == 1);
}

TEST_CASE("shape printing and compatibility") {
  CHECK(Shape{-1, 64}.to_string() == "[?, 64]");
  CHECK(Shape{-1, 64}.keras_string() == "(None, 64)");
  CHECK(Shape{-1}.keras_string() == "(None,)");
  CHECK(Shape{-1, 4}.compatible(Shape{32, 4}));
  CHECK_FALSE(Shape{-1, 4}.compatible(Shape{32, 5}));
  CHECK_FALSE(Shape{4}.compatible(Shape{4, 1}));
}
