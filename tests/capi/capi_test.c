/* The C interface through the real static supervisor on the local provider,
 * using nothing but include/tether/tether.h (built as C, run under ASan in
 * the asan preset). Each check prints what it saw when it fails. */
#include "tether/tether.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond, ...)                                   \
  do {                                                     \
    if (!(cond)) {                                         \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                        \
      fputc('\n', stderr);                                 \
      failures++;                                          \
    }                                                      \
  } while (0)

/* Waits (polling the runtime's fd, 30 s at most) for the completion of
 * `token`; completions of other tokens are released (none are expected). */
static tether_completion await_token(tether_runtime* rt, uint64_t token) {
  tether_completion c;
  for (int waited = 0; waited < 300;) {
    while (tether_runtime_next(rt, &c)) {
      if (c.token == token) return c;
      fprintf(stderr, "unexpected completion of token %llu\n", (unsigned long long)c.token);
      tether_completion_release(&c);
    }
    struct pollfd pfd = {tether_runtime_fd(rt), POLLIN, 0};
    if (poll(&pfd, 1, 100) == 0) waited++;
  }
  fprintf(stderr, "no completion for token %llu within 30 s\n", (unsigned long long)token);
  exit(1);
}

static tether_process* start(tether_runtime* rt, tether_transport* t, const char* script, int stdin_pipe,
                             uint64_t token) {
  const char* argv[] = {"sh", "-c", script};
  tether_start_options o;
  tether_start_options_init(&o);
  o.argv = argv;
  o.argc = 3;
  o.stdin_pipe = stdin_pipe;
  o.output_mode = TETHER_OUTPUT_STREAM;
  CHECK(tether_start(rt, t, &o, token) == 0, "start not queued");
  tether_completion c = await_token(rt, token);
  CHECK(c.error == TETHER_OK && c.process != NULL, "start: %s: %s", tether_error_name(c.error),
        c.message ? c.message : "");
  CHECK(c.pid > 0, "pid %d", (int)c.pid);
  tether_process* p = c.process;
  tether_completion_release(&c);
  if (p == NULL) exit(1);
  return p;
}

/* Reads stdout until the end into a malloc'd buffer; *size its length. */
static unsigned char* read_all(tether_runtime* rt, tether_process* p, size_t* size, uint64_t token) {
  unsigned char* all = NULL;
  *size = 0;
  for (;;) {
    CHECK(tether_process_read(p, token) == 0, "read not queued");
    tether_completion c = await_token(rt, token);
    if (c.error != TETHER_OK) {
      CHECK(0, "read: %s: %s", tether_error_name(c.error), c.message ? c.message : "");
      tether_completion_release(&c);
      break;
    }
    if (c.stream == TETHER_STREAM_END) break;
    CHECK(c.stream == TETHER_STREAM_STDOUT, "stream %d", c.stream);
    CHECK(c.offset == *size, "offset %llu after %zu bytes", (unsigned long long)c.offset, *size);
    all = realloc(all, *size + c.size);
    memcpy(all + *size, c.data, c.size);
    *size += c.size;
    tether_completion_release(&c);
  }
  return all;
}

static void test_exact_bytes_and_exit_code(tether_runtime* rt, tether_transport* t) {
  tether_process* p = start(rt, t, "cat; exit 3", 1, 10);
  unsigned char in[512];
  for (int i = 0; i < 512; i++) in[i] = (unsigned char)(i % 256);
  CHECK(tether_process_write(p, in, sizeof in, 11) == 0, "write not queued");
  tether_completion c = await_token(rt, 11);
  CHECK(c.error == TETHER_OK, "write: %s", c.message ? c.message : "");
  tether_completion_release(&c);
  CHECK(tether_process_close_stdin(p, 12) == 0, "close not queued");
  c = await_token(rt, 12);
  CHECK(c.error == TETHER_OK, "close_stdin: %s", c.message ? c.message : "");
  tether_completion_release(&c);
  size_t size;
  unsigned char* out = read_all(rt, p, &size, 13);
  CHECK(size == sizeof in && memcmp(out, in, size) == 0, "got %zu bytes back, not the 512 written", size);
  free(out);
  CHECK(tether_process_wait(p, 14) == 0, "wait not queued");
  c = await_token(rt, 14);
  CHECK(c.error == TETHER_OK && c.exit.has_code && c.exit.code == 3 && !c.exit.has_signal,
        "wait: error %d code %d signal %d", c.error, c.exit.code, c.exit.signal);
  CHECK(c.exit.output_complete, "output_complete is 0");
  tether_completion_release(&c);
  /* Input after EOF is refused with its code. */
  CHECK(tether_process_write(p, "x", 1, 15) == 0, "write not queued");
  c = await_token(rt, 15);
  CHECK(c.error == TETHER_E_INPUT_CLOSED, "write after close: %s", tether_error_name(c.error));
  tether_completion_release(&c);
  tether_process_free(p);
}

static void test_signal_status_and_cancel(tether_runtime* rt, tether_transport* t) {
  tether_process* p = start(rt, t, "exec sleep 60", 0, 20);
  CHECK(tether_process_status(p, 21) == 0, "status not queued");
  tether_completion c = await_token(rt, 21);
  CHECK(c.error == TETHER_OK && c.state == TETHER_STATE_RUNNING, "status: %d state %d", c.error, c.state);
  tether_completion_release(&c);
  /* A read with nothing to read, aborted: WAIT_ABORTED for it alone. */
  CHECK(tether_process_read(p, 22) == 0, "read not queued");
  tether_cancel(rt, 22);
  c = await_token(rt, 22);
  CHECK(c.error == TETHER_E_WAIT_ABORTED, "cancelled read: %s", tether_error_name(c.error));
  tether_completion_release(&c);
  CHECK(tether_process_signal(p, "NOPE", 23) == 0, "signal not queued");
  c = await_token(rt, 23);
  CHECK(c.error == TETHER_E_INVALID_ARGUMENT, "bad signal name: %s", tether_error_name(c.error));
  tether_completion_release(&c);
  CHECK(tether_process_signal(p, "TERM", 24) == 0, "signal not queued");
  c = await_token(rt, 24);
  CHECK(c.error == TETHER_OK, "signal: %s", c.message ? c.message : "");
  tether_completion_release(&c);
  CHECK(tether_process_wait(p, 25) == 0, "wait not queued");
  c = await_token(rt, 25);
  CHECK(c.error == TETHER_OK && c.exit.has_signal && c.exit.signal == 15, "wait: signal %d", c.exit.signal);
  tether_completion_release(&c);
  tether_process_free(p);
}

static void test_reference_and_reopen(tether_runtime* rt, tether_transport* t) {
  tether_process* p = start(rt, t, "printf before; sleep 1; printf after", 0, 30);
  char* ref = NULL;
  size_t ref_size = 0;
  char* message = NULL;
  int rc = tether_process_reference(p, &ref, &ref_size, &message);
  CHECK(rc == TETHER_OK && ref_size > 0 && strlen(ref) == ref_size, "reference: %s", message ? message : "");
  tether_free_string(message);
  tether_completion c;
  CHECK(tether_process_disconnect(p, 32) == 0, "disconnect not queued");
  c = await_token(rt, 32);
  CHECK(c.error == TETHER_OK, "disconnect: %s", c.message ? c.message : "");
  tether_completion_release(&c);
  tether_process_free(p);
  CHECK(tether_reopen(rt, t, ref, ref_size, 0, 0, 33) == 0, "reopen not queued");
  c = await_token(rt, 33);
  CHECK(c.error == TETHER_OK && c.process != NULL, "reopen: %s", c.message ? c.message : "");
  p = c.process;
  tether_completion_release(&c);
  tether_free_string(ref);
  if (p == NULL) return;
  size_t size;
  unsigned char* out = read_all(rt, p, &size, 34);
  CHECK(size == 11 && memcmp(out, "beforeafter", 11) == 0, "after reopen: %zu bytes", size);
  free(out);
  CHECK(tether_process_wait(p, 35) == 0, "wait not queued");
  c = await_token(rt, 35);
  CHECK(c.error == TETHER_OK && c.exit.has_code && c.exit.code == 0, "wait: %d", c.error);
  tether_completion_release(&c);
  tether_process_free(p);
}

/* tether_process_read_some caps a read (an embedder's own queue bounds what
 * it holds) while a wider window lets the library hold more: after a pause
 * the capped read is full to its cap, a plain read takes more than 64 KiB. */
static void test_read_some(tether_runtime* rt, tether_transport* t) {
  const char* argv[] = {"head", "-c", "1048576", "/dev/zero"};
  tether_start_options o;
  tether_start_options_init(&o);
  o.argv = argv;
  o.argc = 4;
  o.output_mode = TETHER_OUTPUT_STREAM;
  o.output_window_bytes = 256 * 1024;
  CHECK(tether_start(rt, t, &o, 60) == 0, "start not queued");
  tether_completion c = await_token(rt, 60);
  CHECK(c.error == TETHER_OK && c.process != NULL, "start: %s", c.message ? c.message : "");
  tether_process* p = c.process;
  tether_completion_release(&c);
  if (p == NULL) return;
  CHECK(tether_process_read_some(p, TETHER_MAX_CHUNK_BYTES - 1, 61) == TETHER_E_INVALID_ARGUMENT,
        "a cap below one chunk is refused");
  CHECK(tether_process_read_some(NULL, 65536, 61) == TETHER_E_INVALID_ARGUMENT, "NULL process");
  size_t total = 0, most_capped = 0, most_plain = 0;
  for (int i = 0;; i++) {
    if (i < 20) poll(NULL, 0, 150); /* (the window fills meanwhile) */
    const int capped = i % 2 == 0;
    CHECK((capped ? tether_process_read_some(p, 32 * 1024, 62) : tether_process_read(p, 62)) == 0, "read not queued");
    c = await_token(rt, 62);
    if (c.error != TETHER_OK || c.stream == TETHER_STREAM_END) {
      CHECK(c.error == TETHER_OK, "read: %s", c.message ? c.message : "");
      tether_completion_release(&c);
      break;
    }
    CHECK(c.offset == total, "offset %llu after %zu bytes", (unsigned long long)c.offset, total);
    total += c.size;
    if (capped && c.size > most_capped) most_capped = c.size;
    if (!capped && c.size > most_plain) most_plain = c.size;
    tether_completion_release(&c);
  }
  CHECK(total == 1048576, "%zu bytes", total);
  CHECK(most_capped == 32 * 1024, "the largest capped read: %zu bytes", most_capped);
  CHECK(most_plain > 64 * 1024 && most_plain <= 256 * 1024, "the largest plain read: %zu bytes", most_plain);
  tether_process_free(p);
}

static void test_bad_arguments(tether_runtime* rt) {
  tether_transport* t = NULL;
  char* message = NULL;
  int rc = tether_transport_new(rt, "no-such-provider", NULL, 0, &t, &message);
  CHECK(rc == TETHER_E_INVALID_ARGUMENT && message != NULL && t == NULL, "unknown provider: %d", rc);
  tether_free_string(message);
  const char* flags[] = {"--prefix", "ssh host"};
  rc = tether_transport_new(rt, "local", flags, 1, &t, &message);
  CHECK(rc == TETHER_E_INVALID_ARGUMENT && message != NULL, "a flag local does not take: %d", rc);
  tether_free_string(message);
  CHECK(tether_process_read(NULL, 1) == TETHER_E_INVALID_ARGUMENT, "NULL process");
  CHECK(strcmp(tether_error_name(TETHER_E_OUTCOME_UNKNOWN), "OUTCOME_UNKNOWN") == 0, "error name");
  CHECK(strstr(tether_providers(), "local") != NULL, "providers: %s", tether_providers());
}

int main(void) {
  tether_runtime* rt = tether_runtime_new();
  if (rt == NULL) {
    perror("tether_runtime_new");
    return 1;
  }
  test_bad_arguments(rt);
  tether_transport* t = NULL;
  char* message = NULL;
  if (tether_transport_new(rt, "local", NULL, 0, &t, &message) != 0) {
    fprintf(stderr, "local transport: %s\n", message);
    return 1;
  }
  /* An empty argv is refused through a completion with its message. */
  tether_start_options o;
  tether_start_options_init(&o);
  CHECK(tether_start(rt, t, &o, 1) == 0, "start not queued");
  tether_completion c = await_token(rt, 1);
  CHECK(c.error == TETHER_E_INVALID_ARGUMENT && c.message != NULL, "empty argv: %s", tether_error_name(c.error));
  tether_completion_release(&c);

  test_exact_bytes_and_exit_code(rt, t);
  test_signal_status_and_cancel(rt, t);
  test_reference_and_reopen(rt, t);
  test_read_some(rt, t);
  tether_transport_free(t);
  tether_runtime_free(rt);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("capi_test: all checks passed\n");
  return 0;
}
