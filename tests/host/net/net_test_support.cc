#include "tests/host/net/net_test_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http.hpp>
#include <exception>
#include <stdexcept>

namespace tether::net::testing {

namespace {

std::string Drain(BIO* b) {
  char* data = nullptr;
  long n = BIO_get_mem_data(b, &data);
  std::string s(data, static_cast<std::size_t>(n));
  BIO_free(b);
  return s;
}

std::string CertPem(X509* x) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  return Drain(b);
}

std::string KeyPem(EVP_PKEY* k) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, k, nullptr, nullptr, 0, nullptr, nullptr);
  return Drain(b);
}

void AddExt(X509* x, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer ? issuer : x, x, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) throw std::runtime_error("X509V3_EXT_conf_nid");
  X509_add_ext(x, ext, -1);
  X509_EXTENSION_free(ext);
}

X509* Make(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, bool ca, const char* san) {
  static long serial = 1;
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name);
  AddExt(x, issuer, NID_basic_constraints, ca ? "critical,CA:TRUE" : "CA:FALSE");
  AddExt(x, issuer, NID_key_usage, ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
  AddExt(x, issuer, NID_subject_key_identifier, "hash");
  if (issuer) AddExt(x, issuer, NID_authority_key_identifier, "keyid:always");
  if (san) AddExt(x, issuer, NID_subject_alt_name, san);
  X509_sign(x, issuer ? issuer_key : key, EVP_sha256());
  return x;
}

}  // namespace

TestCa::TestCa(const char* name) : key_(EVP_EC_gen("P-256")) {
  cert_ = Make(key_, name, nullptr, nullptr, true, nullptr);
}

TestCa::~TestCa() {
  X509_free(cert_);
  EVP_PKEY_free(key_);
}

std::string TestCa::pem() const { return CertPem(cert_); }

KeyPair TestCa::Issue(const char* cn, const char* san) const {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = Make(key, cn, cert_, key_, false, san);
  KeyPair kp{CertPem(x), KeyPem(key)};
  X509_free(x);
  EVP_PKEY_free(key);
  return kp;
}

std::unique_ptr<asio::ssl::context> ServerTls(const KeyPair& server, const std::string& client_ca) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  ctx->use_certificate_chain(asio::buffer(server.cert_pem));
  ctx->use_private_key(asio::buffer(server.key_pem), asio::ssl::context::pem);
  if (!client_ca.empty()) {
    ctx->add_certificate_authority(asio::buffer(client_ca));
    ctx->set_verify_mode(asio::ssl::verify_peer | asio::ssl::verify_fail_if_no_peer_cert);
  }
  return ctx;
}

TestServer::TestServer(asio::io_context& io, Handler h, asio::ssl::context* tls)
    : io_(io), acceptor_(io), handler_(std::move(h)), tls_(tls) {
  asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), 0);
  acceptor_.open(asio::generic::stream_protocol(AF_INET, IPPROTO_TCP));
  acceptor_.set_option(asio::socket_base::reuse_address(true));
  acceptor_.bind(ep);
  acceptor_.listen();
  sockaddr_in sin{};
  socklen_t len = sizeof sin;
  getsockname(acceptor_.native_handle(), reinterpret_cast<sockaddr*>(&sin), &len);
  port_ = ntohs(sin.sin_port);
  asio::co_spawn(io_, Loop(), asio::detached);
}

TestServer::TestServer(asio::io_context& io, Handler h, const std::string& path)
    : io_(io), acceptor_(io), handler_(std::move(h)) {
  asio::local::stream_protocol::endpoint ep(path);
  acceptor_.open(asio::generic::stream_protocol(AF_UNIX, 0));
  acceptor_.bind(ep);
  acceptor_.listen();
  asio::co_spawn(io_, Loop(), asio::detached);
}

TestServer::~TestServer() {
  boost::system::error_code ec;
  acceptor_.close(ec);
}

asio::awaitable<void> TestServer::Loop() {
  auto accepts = accepts_;
  for (;;) {
    auto stream =
        tls_ ? std::make_shared<Stream>(io_.get_executor(), *tls_) : std::make_shared<Stream>(io_.get_executor());
    auto [ec] = co_await acceptor_.async_accept(stream->lowest(), asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    ++*accepts;
    asio::co_spawn(io_, Serve(stream, handler_), asio::detached);
  }
}

asio::awaitable<void> TestServer::Serve(std::shared_ptr<Stream> s, Handler h) {
  try {
    if (s->tls()) co_await s->tls()->async_handshake(asio::ssl::stream_base::server, asio::use_awaitable);
    co_await h(*s);
  } catch (const std::exception&) {
  }
}

void Run(asio::io_context& io, std::function<asio::awaitable<void>()> test) {
  std::exception_ptr failure;
  bool done = false;
  asio::co_spawn(io, test(), [&](std::exception_ptr e) {
    failure = e;
    done = true;
    io.stop();
  });
  io.run();
  if (!done) throw std::runtime_error("the test coroutine did not finish");
  if (failure) std::rethrow_exception(failure);
}

asio::awaitable<std::optional<ServerRequest>> ReadRequest(Stream& s, boost::beast::flat_buffer& buf) {
  http::request_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  auto [ec, n] = co_await http::async_read(s, buf, parser, asio::as_tuple(asio::use_awaitable));
  if (ec) co_return std::nullopt;
  co_return parser.release();
}

asio::awaitable<void> Respond(Stream& s, int status, std::string body, bool keep_alive, const char* content_type) {
  http::response<http::string_body> res(static_cast<http::status>(status), 11);
  res.set(http::field::content_type, content_type);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  co_await http::async_write(s, res, asio::use_awaitable);
}

asio::awaitable<void> WriteRaw(Stream& s, std::string bytes) {
  co_await asio::async_write(s, asio::buffer(bytes), asio::use_awaitable);
}

}  // namespace tether::net::testing
