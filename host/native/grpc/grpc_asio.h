// gRPC's callback API awaited from Asio coroutines (internal to the gRPC
// providers: modal, boxd). gRPC completes calls on its own threads; every completion is
// posted back to the caller's executor, so no gRPC thread ever runs our code
// and nothing blocks the executor. A pending call keeps the executor's work
// count up (the io_context does not return under it), and cancelling the
// awaiting operation (Asio per-operation cancellation, `op || timer`)
// cancels the RPC (ClientContext::TryCancel).
//
//   auto ctx = std::make_shared<grpc::ClientContext>();
//   Resp resp;
//   grpc::Status st = co_await AwaitUnary(ctx, [&](auto done) {
//     stub->async()->Method(ctx.get(), &req, &resp, std::move(done));
//   });
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_callback.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace tether::rpc {

// Starts a unary call: `start(done)` must begin it with `done` as its
// completion (a std::function<void(grpc::Status)>); `ctx` must be the call's
// context, a named shared_ptr of the caller (it is copied here). Completes
// on the awaiting coroutine's executor.
template <class Start>
boost::asio::awaitable<grpc::Status> AwaitUnary(const std::shared_ptr<grpc::ClientContext>& ctx, Start start) {
  namespace asio = boost::asio;
  asio::any_io_executor ex = co_await asio::this_coro::executor;
  // Named, not a temporary in the co_await operand: g++ 12 destroys such a
  // closure twice (it holds `ctx`).
  auto init = [ctx, ex, start = std::move(start)](auto handler) mutable {
    using Handler = decltype(handler);
    auto slot = asio::get_associated_cancellation_slot(handler);
    if (slot.is_connected()) slot.assign([ctx](asio::cancellation_type) { ctx->TryCancel(); });
    struct State {
      std::optional<Handler> h;
      asio::any_io_executor work;  // tracked: the io_context waits for the call
    };
    auto state = std::make_shared<State>();
    state->work = asio::prefer(asio::get_associated_executor(handler, ex), asio::execution::outstanding_work.tracked);
    state->h.emplace(std::move(handler));
    start(std::function<void(grpc::Status)>([state](grpc::Status s) {
      asio::any_io_executor w = state->work;
      asio::post(w, [state, s = std::move(s)]() mutable {
        Handler h = std::move(*state->h);
        state->h.reset();
        state->work = asio::any_io_executor();
        auto done_slot = asio::get_associated_cancellation_slot(h);
        if (done_slot.is_connected()) done_slot.clear();
        std::move(h)(std::move(s));
      });
    }));
  };
  grpc::Status st = co_await asio::async_initiate<decltype(asio::use_awaitable), void(grpc::Status)>(
      std::move(init), asio::use_awaitable);
  co_return st;
}

// Where a server stream's messages go, on the executor.
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  virtual void OnMessage(std::string data) = 0;        // then Next() for another
  virtual void OnDone(const grpc::Status& status) = 0;  // the last call
};

// A server-streaming call read with backpressure: one message is asked for
// at a time (Next()), so a slow reader slows the server instead of piling
// bytes up here. Owned by a shared_ptr; it holds itself until gRPC is done.
template <class Response>
class ServerStream : public grpc::ClientReadReactor<Response>,
                     public std::enable_shared_from_this<ServerStream<Response>> {
 public:
  ServerStream(boost::asio::any_io_executor ex, std::weak_ptr<StreamSink> sink)
      : work_(boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked)), sink_(std::move(sink)) {}

  grpc::ClientContext* context() { return &ctx_; }

  // `begin(reactor)` must call stub->async()->Method(context(), &req, reactor).
  template <class Begin>
  void Start(Begin begin) {
    self_ = this->shared_from_this();
    begin(this);
    this->AddHold();
    read_out_ = true;
    this->StartRead(&resp_);
    this->StartCall();
  }

  // Asks for the next message (after OnMessage).
  void Next() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (cancelled_ || !held_ || read_out_) return;
      read_out_ = true;
    }
    this->StartRead(&resp_);
  }

  // Ends the call; OnDone follows (CANCELLED unless it had ended).
  void Cancel() {
    bool release = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (cancelled_) return;
      cancelled_ = true;
      release = held_ && !read_out_;
      if (release) held_ = false;
    }
    ctx_.TryCancel();
    if (release) this->RemoveHold();
  }

  void OnReadDone(bool ok) override {
    bool release = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      read_out_ = false;
      if (!ok || cancelled_) {
        release = held_;
        held_ = false;
        ok = false;
      }
    }
    if (!ok) {
      if (release) this->RemoveHold();
      return;
    }
    std::string data = std::move(*resp_.mutable_data());
    boost::asio::post(work_, [sink = sink_, data = std::move(data)]() mutable {
      if (auto s = sink.lock()) s->OnMessage(std::move(data));
    });
  }

  void OnDone(const grpc::Status& s) override {
    boost::asio::any_io_executor w = work_;
    boost::asio::post(w, [self = std::move(self_), s]() mutable {
      if (auto sink = self->sink_.lock()) sink->OnDone(s);
      self->work_ = boost::asio::any_io_executor();
      self.reset();  // may destroy this
    });
  }

 private:
  grpc::ClientContext ctx_;
  Response resp_;
  boost::asio::any_io_executor work_;
  std::weak_ptr<StreamSink> sink_;
  std::shared_ptr<ServerStream> self_;  // until OnDone
  std::mutex mu_;
  bool held_ = true, read_out_ = false, cancelled_ = false;
};

}  // namespace tether::rpc
