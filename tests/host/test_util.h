// Shared by the host unit tests: run a coroutine against a fresh local
// sandbox until every piece of work it started has finished.
#pragma once

#include <doctest.h>
#include <stdlib.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <string>

#include "tether/local_transport.h"

namespace tether::testing {

template <typename Body>
void RunLocal(const char* name, Body body) {
  std::string tmpl = std::string("/tmp/") + name + "-XXXXXX";
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  {
    boost::asio::io_context io;
    auto t = MakeLocalTransport(io.get_executor(), LocalOptions{tmpl});
    REQUIRE(t.ok());
    bool done = false;
    boost::asio::co_spawn(io, body(**t), [&](std::exception_ptr e) {
      done = true;
      if (e) std::rethrow_exception(e);
    });
    io.run();
    CHECK(done);
  }
  std::filesystem::remove_all(tmpl);
}

}  // namespace tether::testing
