// The docker provider's options (what docker_transport.h's factory takes) and its
// entry in the provider registry: the flags that set them, with their help.
// Facts and assumptions about the service: docker_transport.h.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

#include "tether/providers.h"

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

// The registry's entry for --provider docker (host/native/registry.cc).
ProviderInfo DockerProvider();

}  // namespace tether
