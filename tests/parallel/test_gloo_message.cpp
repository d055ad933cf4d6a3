// parallel/gloo_message.h: what a user is shown of a Gloo exception.
#include <catch2/catch.hpp>
#include <string>

#include "parallel/gloo_message.h"

TEST_CASE("Gloo messages lose their [file:line] prefixes and trailing newlines", "[gloo]") {
  using dit::clean_gloo_message;
  CHECK(clean_gloo_message("[/build/gloo/gloo/transport/tcp/pair.cc:589] Connection closed by peer [10.0.0.2]:41234\n") ==
        "Connection closed by peer [10.0.0.2]:41234");
  CHECK(clean_gloo_message("[a.cc:1] [b.cc:2] Wait timeout for key(s): [\"rank1\"] \n") ==
        "Wait timeout for key(s): [\"rank1\"]");
  CHECK(clean_gloo_message("no prefix") == "no prefix");
  CHECK(clean_gloo_message("[unclosed prefix") == "[unclosed prefix");
  CHECK(clean_gloo_message("[a.cc:1] ") == "");
  CHECK(clean_gloo_message("") == "");
}
