#!/usr/bin/env python3
"""A provider endpoint that lies: every request gets the same hostile answer.

    hostile_http.py DIR STATUS KIND

Listens on 127.0.0.1 (an unused port), writes the port to DIR/port, appends
one line per request to DIR/requests ("METHOD PATH"), and answers every
request with STATUS and a body of KIND:

  json  {"message": HOSTILE, "code": HOSTILE}   (what most APIs send)
  text  HOSTILE as text/plain
  huge  HOSTILE followed by 4 MiB of "A", as text/plain
  redirect  Location: /redirected/... (same origin): a client must not
        follow it (no provider documents a redirect)
  away  Location: http://127.0.0.2:PORT2/elsewhere, another origin, served
        by a second listener that appends "METHOD PATH AUTHORIZATION-HEADERS"
        to DIR/elsewhere for any request (none may come: credentials
        would go with it); PORT2 is in DIR/away-port

HOSTILE is error text a sandbox that owns its endpoint could send to rewrite
the user's terminal: an OSC title change, a screen clear, colours, C1 CSI,
a right-to-left override, NUL and invalid UTF-8. Stops on SIGTERM.
"""
import http.server
import json
import os
import sys
import threading

HOSTILE = ("PWNED\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m\u009b31m \u202eevil\u202c"
           " nul\x00 bell\x07 \rfake line\ntether: fake\n")
HOSTILE_BYTES = HOSTILE.encode("utf-8") + b" \xff\xfe\xc0\xaf end"


def main():
    out_dir, status, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if kind == "json":
        body = json.dumps({"message": HOSTILE, "code": HOSTILE}, ensure_ascii=False).encode()
        ctype = "application/json"
    elif kind == "text":
        body, ctype = HOSTILE_BYTES, "text/plain"
    elif kind in ("redirect", "away"):
        body, ctype = HOSTILE_BYTES, "text/plain"
    else:
        body, ctype = HOSTILE_BYTES + b"A" * (4 << 20), "text/plain"

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def answer(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            with open(os.path.join(out_dir, "requests"), "a") as f:
                f.write(f"{self.command} {self.path}\n")
            self.send_response(status)
            if kind == "redirect":
                self.send_header("Location", "/redirected" + self.path)
            elif kind == "away":
                self.send_header("Location", f"http://127.0.0.2:{away_port}/elsewhere")
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

        def log_message(self, *args):
            pass

    away_port = 0
    if kind == "away":
        class Elsewhere(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def answer(self):
                creds = " ".join(f"{k}: {v}" for k, v in self.headers.items()
                                 if k.lower() in ("authorization", "x-api-key", "x-access-token"))
                with open(os.path.join(out_dir, "elsewhere"), "a") as f:
                    f.write(f"{self.command} {self.path} {creds}\n")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = answer

            def log_message(self, *args):
                pass

        away = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Elsewhere)
        away_port = away.server_address[1]
        threading.Thread(target=away.serve_forever, daemon=True).start()
        with open(os.path.join(out_dir, "away-port"), "w") as f:
            f.write(str(away_port))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = os.path.join(out_dir, "port.tmp")
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, os.path.join(out_dir, "port"))
    server.serve_forever()


if __name__ == "__main__":
    main()
