// The `docker` provider: a container reached through the Docker Engine API
// (Docker's own engine, or podman's `system service`), with no docker CLI.
//
//   DockerOptions o;
//   o.container = "my-box";                  // name or id
//   o.endpoint = "unix:///run/docker.sock";   // empty: $DOCKER_HOST, else /var/run/docker.sock
//   absl::StatusOr<std::shared_ptr<Transport>> t = MakeDockerTransport(io.get_executor(), o);
//   auto p = co_await Process::Start(**t, start_options);  // as with any Transport
//
// Exec runs `POST /containers/{id}/exec` (stdin, stdout and stderr
// attached, no tty) and `POST /exec/{id}/start` upgraded to a raw stream:
// stdin is written raw, stdout and stderr come back multiplexed with the
// 8-byte stdcopy header (host/codec/stdcopy.h); stdout is the channel,
// stderr its Diagnostics(), and the exit status comes from `GET
// /exec/{id}/json` once the stream ends. PutFile sends a one-file tar
// (host/codec/tar.h) to `PUT /containers/{id}/archive` under a temporary
// name, then checks its sha256 and renames it into place over Exec.
//
// The API cannot kill an exec, and an engine may leave one running, its
// output undrained, once the client is gone (podman does): a channel closed
// before its end has its command killed through another exec, found by its
// exact command line among the processes the engine started (a command
// that execs another one is out of reach), and the next Exec waits for that.
//
// Errors: a missing container is kNotFound naming it, a stopped one
// kFailedPrecondition with the engine's message, an engine that cannot be
// reached kUnavailable naming the endpoint (and DOCKER_HOST).
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "tether/transport.h"

namespace tether {

// TLS to a tcp:// engine, as the docker CLI reads it from the environment.
struct DockerTls {
  bool verify = false;    // DOCKER_TLS_VERIFY (non-empty): https with certificates checked
  std::string cert_path;  // DOCKER_CERT_PATH (default ~/.docker): ca.pem, cert.pem, key.pem
};

struct DockerOptions {
  std::string container;  // name or id (required)
  // unix:///path, tcp://host:port, http(s)://host:port; empty: $DOCKER_HOST,
  // else unix:///var/run/docker.sock.
  std::string endpoint;
  std::string ca_file;  // a CA to trust besides DOCKER_CERT_PATH/ca.pem
  // nullopt: from the environment (DockerTlsFromEnvironment()).
  std::optional<DockerTls> tls;
  std::string api_version = "/v1.41";  // prefixed to every path ("" for the engine's latest)
  // Called as an upload proceeds (bytes sent, total).
  std::function<void(std::size_t, std::size_t)> upload_progress;
};

// DOCKER_TLS_VERIFY and DOCKER_CERT_PATH (default $HOME/.docker).
DockerTls DockerTlsFromEnvironment();

// Checks the options (kInvalidArgument: no container, a bad endpoint,
// unreadable client certificates) and makes the transport; nothing is
// contacted until the first call.
absl::StatusOr<std::shared_ptr<Transport>> MakeDockerTransport(boost::asio::any_io_executor ex,
                                                               DockerOptions options);

}  // namespace tether
