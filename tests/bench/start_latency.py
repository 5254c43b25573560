"""Start latency: `echo hi` to its first byte and to its exit, through tether
and through what a runtime would use instead, at an added round trip, with
the round trips counted (issue 32). Run by start_latency.sh (which starts the
emulators and the sshd); never part of the test suite: it prints figures, it
asserts nothing but that every job printed `hi` and exited 0.

Every target's traffic goes through a DelayProxy (delay_proxy.py) that adds
DELAY ms each way. For each delay, each runner does --runs jobs:

  runner          what one job is
  cli             `tether run --no-stdin FLAGS -- echo hi`, a new process
  c++ cold/warm   tether::Process::Start on a new / the kept Transport
                  (tether_start_runner, one process for all its jobs)
  python cold/warm  the tether package, a new / the kept Sandbox
  node cold/warm  @tether/node (node/), a new / the kept Sandbox
  sdk cold/warm   the provider's official SDK (start_sdk.mjs), a new / the
                  kept client object; for ssh: `ssh host echo hi`, without
                  / with a shared connection (ControlMaster)

A warm runner's first job (its cold start) is left out of its figures.
Columns, per delay: medians of first byte and exit in ms; `turns`, the
proxy's count of request/response turns of one job (connections that
overlap are each counted); `conns`, connections opened. `RT` is the
round trips on the critical path to the first byte, from the slope between
the smallest and the largest delay: (first(d2) - first(d1)) / (2 (d2 - d1)).
`x sdk` is first byte / the same-mode baseline's first byte at that delay.
First, the CLI's own start: `tether version` against /bin/true.
The phase table places tether's own marks (TETHER_TRACE, host/support/
trace.h) on the job's time line: median ms from the job's start.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from delay_proxy import DelayProxy  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PHASES = ["cli.main", "start.begin", "start.prepared", "net.connected", "net.tls", "start.probed",
          "start.installed", "tunnel.exec", "tunnel.exec_open", "tunnel.connected", "tunnel.exec_done",
          "tunnel.welcome", "start.attached"]


class Job:
    def __init__(self, first: float, total: float, counts: Dict[str, int], marks: Dict[str, float]) -> None:
        self.first, self.total, self.counts, self.marks = first, total, counts, marks


class Trace:
    """The marks tether's runners append to one file, read job by job."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0

    def since(self, t0: float) -> Dict[str, float]:
        """Each phase's first mark after the last call, in ms after t0."""
        marks: Dict[str, float] = {}
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
                self.offset += len(data)
        except FileNotFoundError:
            return marks
        for line in data.decode("utf-8", "replace").splitlines():
            parts = line.split(" ", 3)
            if len(parts) < 3:
                continue
            ms = (int(parts[0]) / 1e9 - t0) * 1000
            marks.setdefault(parts[2], ms)
        return marks


class CommandRunner:
    """One new process per job: ms to its first stdout byte and to its exit."""

    def __init__(self, argv: List[str], env: Dict[str, str]) -> None:
        self.argv, self.env = argv, env

    def job(self) -> Dict[str, float]:
        t0 = time.monotonic()
        # (Unbuffered: read(1) takes one byte, and communicate() the rest.)
        p = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=self.env, bufsize=0)
        out = p.stdout.read(1)
        first = time.monotonic()
        rest, err = p.communicate()
        total = time.monotonic()
        if p.returncode != 0 or (out + rest) != b"hi\n":
            raise RuntimeError(f"{self.argv[0]} exited {p.returncode}, printed {out + rest!r}: "
                               f"{err.decode(errors='replace')[-800:]}")
        return {"first": (first - t0) * 1000, "total": (total - t0) * 1000, "t0": t0}

    def close(self) -> None:
        pass


class LineRunner:
    """A process that does one job per "run" line and answers one JSON line."""

    def __init__(self, argv: List[str], env: Dict[str, str]) -> None:
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                  bufsize=1)

    def job(self) -> Dict[str, float]:
        t0 = time.monotonic()
        self.p.stdin.write("run\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"runner exited ({self.p.poll()})")
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError(r["error"])
        r["t0"] = t0
        return r

    def close(self) -> None:
        self.p.stdin.close()
        try:
            self.p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.p.kill()


def median(xs: List[float]) -> Optional[float]:
    return statistics.median(xs) if xs else None


def fmt(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


class Target:
    """A provider: how each runner reaches it through the proxy at `url`."""

    def __init__(self, name: str, upstream: str) -> None:
        self.name = name
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))

    def runners(self, args, proxy_port: int, env: Dict[str, str]) -> Dict[str, object]:
        raise NotImplementedError


class SdkTarget(Target):
    """A native provider's emulator, described by start_latency.sh as JSON:
      name      the provider ("e2b")
      upstream  host:port of the emulator (all its traffic goes through one proxy)
      scheme    "https" or "http"
      flags     tether's provider flags; "{url}" is the proxy's URL
      sdk       start_sdk.mjs's config; "{url}" as in flags
      env       extra environment (NODE_EXTRA_CA_CERTS for the SDK, keys)
      templates {"{name}": file}: file is copied with "{url}" replaced, and
                "{name}" in flags and sdk becomes the copy's path (a kubeconfig)
    """

    def __init__(self, spec: Dict[str, object]) -> None:
        super().__init__(str(spec["name"]), str(spec["upstream"]))
        self.spec = spec

    def runners(self, args, port: int, env: Dict[str, str]):
        url = f"{self.spec.get('scheme', 'https')}://127.0.0.1:{port}"
        subst = {"{url}": url}
        for key, path in dict(self.spec.get("templates", {})).items():
            with open(path) as f:
                text = f.read().replace("{url}", url)
            copy = f"{path}.proxied-{port}"
            with open(copy, "w") as f:
                f.write(text)
            subst[key] = copy

        def fill(x: str) -> str:
            for k, v in subst.items():
                x = x.replace(k, v)
            return x

        flags = [fill(str(f)) for f in self.spec["flags"]]
        env = dict(env, **{k: str(v) for k, v in dict(self.spec.get("env", {})).items()})
        sdk = json.dumps(dict({k: fill(v) if isinstance(v, str) else v for k, v in dict(self.spec["sdk"]).items()},
                              emulatorDir=args.emulator_dir))
        sdk_argv = ["node", f"{HERE}/start_sdk.mjs", self.name]
        return tether_runners(args, self.name, flags, env) | {
            "sdk cold": lambda: LineRunner([*sdk_argv, "cold", sdk], env),
            "sdk warm": lambda: LineRunner([*sdk_argv, "warm", sdk], env),
        }


class SshTarget(Target):
    """A private sshd (tests/lib/loopback_sshd.sh): tether's command provider
    with an ssh prefix, against plain ssh."""

    def __init__(self, spec: str) -> None:
        port, self.key, self.user = spec.split(",")
        super().__init__("ssh", f"127.0.0.1:{port}")

    def ssh(self, port: int, shared: bool) -> List[str]:
        argv = ["ssh", "-T", "-F", "/dev/null", "-i", self.key, "-p", str(port), "-o", "BatchMode=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"]
        if shared:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_dir}/cm-%C",
                     "-o", "ControlPersist=60"]
        return argv + [f"{self.user}@127.0.0.1"]

    def runners(self, args, port: int, env: Dict[str, str]):
        self.control_dir = tempfile.mkdtemp(prefix="tether-start-ssh-")
        cold, warm = " ".join(self.ssh(port, False)), " ".join(self.ssh(port, True))
        out = {}
        for mode, prefix in (("cold", cold), ("warm", warm)):
            t = tether_runners(args, "command", ["--prefix", prefix], env)
            out[f"cli {mode}"] = t["cli"]
            for lib in ("c++", "python", "node"):
                if f"{lib} {mode}" in t:
                    out[f"{lib} {mode}"] = t[f"{lib} {mode}"]
        out["sdk cold"] = lambda: CommandRunner(self.ssh(port, False) + ["echo", "hi"], env)
        out["sdk warm"] = lambda: CommandRunner(self.ssh(port, True) + ["echo", "hi"], env)
        return out


def tether_runners(args, provider: str, flags: List[str], env: Dict[str, str]):
    out = {"cli": lambda: CommandRunner([args.tether, "run", "--provider", provider, *flags, "--no-stdin", "--",
                                         "echo", "hi"], env)}
    if args.runner:
        out["c++ cold"] = lambda: LineRunner([args.runner, "cold", provider, *flags], env)
        out["c++ warm"] = lambda: LineRunner([args.runner, "warm", provider, *flags], env)
    if args.python:
        py = [args.python, f"{HERE}/start_runner.py"]
        out["python cold"] = lambda: LineRunner([*py, "cold", provider, *flags], env)
        out["python warm"] = lambda: LineRunner([*py, "warm", provider, *flags], env)
    if args.node:
        js = ["node", f"{HERE}/start_runner.mjs"]
        node_env = {**env, "TETHER_NODE_ADDON": args.node}
        out["node cold"] = lambda: LineRunner([*js, "cold", provider, *flags], node_env)
        out["node warm"] = lambda: LineRunner([*js, "warm", provider, *flags], node_env)
    return out


def measure(target: Target, args, out) -> None:
    proxy = DelayProxy(*target.upstream)
    work = tempfile.mkdtemp(prefix="tether-start-")
    trace = Trace(os.path.join(work, "trace"))
    env = dict(os.environ, TETHER_TRACE=trace.path)
    runners = target.runners(args, proxy.port, env)
    results: Dict[str, Dict[float, List[Job]]] = {}
    # The supervisor's first install is not a start's price.
    r = runners.get("cli") or runners.get("cli cold")
    r().job()
    trace.since(time.monotonic())
    for delay in args.delays:
        proxy.set_delay(delay)
        for name, make in runners.items():
            runner = make()
            jobs: List[Job] = []
            try:
                n = args.runs + (1 if name.endswith("warm") else 0)
                for i in range(n):
                    proxy.take()
                    j = runner.job()
                    time.sleep(0.05)  # the proxy's last deliveries (closes) land in this job's counts
                    counts = proxy.take()
                    marks = trace.since(j["t0"])
                    if name.endswith("warm") and i == 0:
                        continue
                    jobs.append(Job(j["first"], j["total"], counts, marks))
            finally:
                runner.close()
            results.setdefault(name, {})[delay] = jobs
            print(f"start_latency: {target.name} {name} at {delay} ms: first byte "
                  f"{fmt(median([j.first for j in jobs]))} ms", file=sys.stderr)
    proxy.close()
    report(target, args, results, out)


def report(target: Target, args, results, out) -> None:
    d1, d2 = min(args.delays), max(args.delays)
    print(f"\n### {target.name}: `echo hi`, medians of {args.runs} (ms; one-way delay added by the proxy)\n",
          file=out)
    head = ["runner"]
    for d in args.delays:
        head += [f"first @{d:g}", f"exit @{d:g}", f"x sdk @{d:g}"]
    head += ["turns", "conns", "RT"]
    print("| " + " | ".join(head) + " |", file=out)
    print("|" + "---|" * len(head), file=out)
    for name, by_delay in results.items():
        mode = "warm" if name.endswith("warm") else "cold"
        row = [name]
        for d in args.delays:
            jobs = by_delay[d]
            first = median([j.first for j in jobs])
            base = median([j.first for j in results.get(f"sdk {mode}", {}).get(d, [])])
            row += [fmt(first), fmt(median([j.total for j in jobs])),
                    "-" if name.startswith("sdk") or not base else f"{first / base:.2f}"]
        top = by_delay[d2]
        row += [fmt(median([j.counts["turns"] for j in top]), 0), fmt(median([j.counts["connections"] for j in top]), 0)]
        rt = None
        if d2 > d1:
            rt = (median([j.first for j in by_delay[d2]]) - median([j.first for j in by_delay[d1]])) / (2 * (d2 - d1))
        row.append(fmt(rt))
        print("| " + " | ".join(row) + " |", file=out)
    # Phases: where tether's time goes, at the largest delay.
    names = [n for n in results if not n.startswith("sdk")]
    seen = [p for p in PHASES if any(p in j.marks for n in names for j in results[n][d2])]
    if not seen:
        return
    print(f"\nPhases at {d2:g} ms (median ms from the job's start to tether's mark; "
          f"first byte last):\n", file=out)
    print("| runner | " + " | ".join(seen) + " | first byte |", file=out)
    print("|" + "---|" * (len(seen) + 2), file=out)
    for n in names:
        jobs = results[n][d2]
        cells = [fmt(median([j.marks[p] for j in jobs if p in j.marks])) for p in seen]
        print(f"| {n} | " + " | ".join(cells) + f" | {fmt(median([j.first for j in jobs]))} |", file=out)


def cli_start(args, out) -> None:
    """The CLI's own start, before any provider: `tether version` against an
    empty process (/bin/true), medians of 5 x --runs, one after the other."""
    def med(argv: List[str]) -> float:
        ts = []
        for _ in range(5 * args.runs):
            t0 = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
            ts.append((time.perf_counter() - t0) * 1000)
        return statistics.median(ts)
    base = med(["/bin/true"])
    version = med([args.tether, "version"])
    print(f"\n### The CLI's start: medians of {5 * args.runs} (ms)\n", file=out)
    print("| job | ms | x /bin/true |\n|---|---|---|", file=out)
    print(f"| /bin/true | {fmt(base)} | - |", file=out)
    print(f"| tether version | {fmt(version)} | {version / base:.1f} |", file=out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tether", required=True, help="the tether CLI")
    ap.add_argument("--runner", help="tether_start_runner (the C++ library's runner)")
    ap.add_argument("--python", help="a Python with the tether package installed")
    ap.add_argument("--node", help="the Node package's addon (node/build.sh): node cold/warm rows")
    ap.add_argument("--emulator-dir", default=os.path.join(HERE, "..", "emulators"))
    ap.add_argument("--target", action="append", default=[],
                    help="a native provider's emulator, as JSON (SdkTarget); repeatable")
    ap.add_argument("--ssh", help="PORT,KEY,USER of a running sshd")
    ap.add_argument("--only", help="only the targets whose name contains this")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--delays", default="0,25", help="one-way delays in ms, comma-separated")
    args = ap.parse_args()
    args.delays = [float(d) for d in args.delays.split(",")]
    targets: List[Target] = []
    for t in args.target:
        targets.append(SdkTarget(json.loads(t)))
    if args.ssh:
        targets.append(SshTarget(args.ssh))
    if not targets:
        ap.error("no target: give --target and/or --ssh")
    print(f"## Start latency (tests/bench/start_latency.sh, {args.runs} runs, {os.cpu_count()} cores)", flush=True)
    cli_start(args, sys.stdout)
    for t in targets:
        if args.only and args.only not in t.name:
            continue
        measure(t, args, sys.stdout)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
