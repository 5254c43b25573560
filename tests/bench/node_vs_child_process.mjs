// @tether/node against Node's own child_process.spawn on the local provider,
// in one run: both sides alternate, each row N times (--reps, default 5),
// medians with the spread. Rows: bytes through child.output() (format
// "bytes") against reading the child's stdout pipe, zeros and random bytes
// (the random row checks a SHA-256 on both sides, so exactness is shown);
// 200 processes started and awaited from one event loop, concurrently and
// one after another. A benchmark, not a test: nothing is asserted on time.
//
//   ./dev nodebench [--reps N] [--mib N] [--procs N] [--only SUBSTRING]
//   (or: TETHER_NODE_ADDON=... TETHER_SUPERVISOR_DIR=... node tests/bench/node_vs_child_process.mjs)
//
// Prints a Markdown table: the median, the range over the runs, and the
// ratio tether / child_process (throughput over throughput, or time over
// time inverted: above 1 is tether faster).
import { spawn } from "node:child_process";
import { createHash, randomFillSync } from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const tether = await import(path.join(here, "..", "..", "node", "lib", "index.mjs"));

const MiB = 1 << 20;
const { values: opt } = parseArgs({
  options: {
    reps: { type: "string", default: process.env.BENCH_REPS ?? "5" },
    mib: { type: "string", default: process.env.BENCH_MIB ?? "256" },
    procs: { type: "string", default: process.env.BENCH_PROCS ?? "200" },
    only: { type: "string", default: "" },
  },
});
const reps = Number(opt.reps);
const size = Number(opt.mib) * MiB;
const procs = Number(opt.procs);

function check(cond, what) {
  if (!cond) throw new Error(`node_vs_child_process: ${what}`);
}

// --- bytes -----------------------------------------------------------------

// The consumer sees every chunk (counts it, optionally hashes it).
async function tetherBytes(sb, argv, hash) {
  const child = await sb.processes.start({ command: { kind: "argv", argv }, output: { mode: "stream", format: "bytes" } });
  const h = hash ? createHash("sha256") : null;
  let got = 0;
  for await (const c of child.output()) {
    got += c.bytes.length;
    h?.update(c.bytes);
  }
  const exit = await child.wait();
  await child.detach();
  check(exit.exitCode === 0 && exit.outputComplete, `tether: ${JSON.stringify(exit)}`);
  return { got, digest: h?.digest("hex") };
}

async function spawnBytes(argv, hash) {
  const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "inherit"] });
  const h = hash ? createHash("sha256") : null;
  let got = 0;
  const closed = new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve(code));
  });
  for await (const b of child.stdout) {
    got += b.length;
    h?.update(b);
  }
  const code = await closed;
  check(code === 0, `child_process: exit ${code}`);
  return { got, digest: h?.digest("hex") };
}

// --- many processes --------------------------------------------------------

const FANOUT_ARGV = ["echo", "hi"];

async function tetherOne(sb) {
  const child = await sb.processes.start({ command: { kind: "argv", argv: FANOUT_ARGV }, output: { mode: "stream", format: "bytes" } });
  let got = 0;
  for await (const c of child.output()) got += c.bytes.length;
  const exit = await child.wait();
  await child.detach();
  check(got === 3 && exit.exitCode === 0, `tether: ${got} bytes, ${JSON.stringify(exit)}`);
}

function spawnOne() {
  return new Promise((resolve, reject) => {
    const child = spawn(FANOUT_ARGV[0], FANOUT_ARGV.slice(1), { stdio: ["ignore", "pipe", "pipe"] });
    let got = 0;
    child.stdout.on("data", (b) => (got += b.length));
    child.stderr.resume();
    child.on("error", reject);
    child.on("close", (code) => {
      if (got === 3 && code === 0) resolve();
      else reject(new Error(`child_process: ${got} bytes, exit ${code}`));
    });
  });
}

async function concurrently(n, one) {
  await Promise.all(Array.from({ length: n }, () => one()));
}

async function sequentially(n, one) {
  for (let i = 0; i < n; ++i) await one();
}

// --- the run ---------------------------------------------------------------

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function timed(fn) {
  const t0 = process.hrtime.bigint();
  const r = await fn();
  return { ms: Number(process.hrtime.bigint() - t0) / 1e6, r };
}

async function main() {
  const sb = tether.local();
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "tether-nodebench-"));
  try {
    // The random source: a file in the page cache, so the child (cat) costs
    // little; its digest is what both sides must see.
    const randomFile = path.join(scratch, "random.bin");
    const block = Buffer.allocUnsafe(4 * MiB);
    const fd = fs.openSync(randomFile, "w");
    const want = createHash("sha256");
    for (let at = 0; at < size; at += block.length) {
      const part = block.subarray(0, Math.min(block.length, size - at));
      randomFillSync(part);
      want.update(part);
      fs.writeSync(fd, part);
    }
    fs.closeSync(fd);
    const wantDigest = want.digest("hex");

    await tetherBytes(sb, ["head", "-c", String(MiB), "/dev/zero"]); // warm-up: the supervisor in place
    await spawnBytes(["head", "-c", String(MiB), "/dev/zero"]);

    const zeros = ["head", "-c", String(size), "/dev/zero"];
    const random = ["cat", randomFile];
    const bytesCheck = (digest) => (res) => {
      check(res.got === size, `got ${res.got} bytes, want ${size}`);
      if (digest) check(res.digest === digest, `sha256 ${res.digest}, want ${digest}`);
    };
    const mb = size / MiB;
    const rows = [
      {
        name: `${mb} MiB of zeros through output() (bytes)`,
        unit: "MiB/s",
        tether: () => tetherBytes(sb, zeros),
        base: () => spawnBytes(zeros),
        verify: bytesCheck(null),
        figure: (ms) => mb / (ms / 1000),
      },
      {
        name: `${mb} MiB of random bytes through output(), sha256 checked`,
        unit: "MiB/s",
        tether: () => tetherBytes(sb, random, true),
        base: () => spawnBytes(random, true),
        verify: bytesCheck(wantDigest),
        figure: (ms) => mb / (ms / 1000),
      },
      {
        name: `${procs} processes (echo hi) started and awaited concurrently`,
        unit: "ms",
        tether: () => concurrently(procs, () => tetherOne(sb)),
        base: () => concurrently(procs, spawnOne),
        verify: () => {},
        figure: (ms) => ms,
      },
      {
        name: `${procs} processes (echo hi) one after another`,
        unit: "ms",
        tether: () => sequentially(procs, () => tetherOne(sb)),
        base: () => sequentially(procs, spawnOne),
        verify: () => {},
        figure: (ms) => ms,
      },
    ].filter((row) => row.name.includes(opt.only));

    const results = rows.map(() => ({ tether: [], base: [] }));
    for (let rep = 0; rep < reps; ++rep) {
      for (const [i, row] of rows.entries()) {
        // Alternating which side goes first, so neither always runs after
        // the other's leftovers.
        const order = rep % 2 ? ["base", "tether"] : ["tether", "base"];
        for (const side of order) {
          const { ms, r } = await timed(row[side]);
          row.verify(r);
          results[i][side].push(ms);
        }
      }
      process.stderr.write(`nodebench: run ${rep + 1}/${reps} done\n`);
    }

    const fmt = (x) => (x >= 100 ? x.toFixed(0) : x.toFixed(1));
    console.log(`Node ${process.version}, ${os.cpus().length} cores, load ${os.loadavg().map((l) => l.toFixed(1)).join(" ")}, ${reps} runs per row, medians (range)\n`);
    console.log("| job | tether (@tether/node) | child_process.spawn | ratio tether / child_process |");
    console.log("|---|---:|---:|---:|");
    for (const [i, row] of rows.entries()) {
      const t = results[i].tether.map(row.figure);
      const b = results[i].base.map(row.figure);
      const ratio = row.unit === "ms" ? median(b) / median(t) : median(t) / median(b);
      const cell = (xs) => `${fmt(median(xs))} ${row.unit} (${fmt(Math.min(...xs))}-${fmt(Math.max(...xs))})`;
      console.log(`| ${row.name} | ${cell(t)} | ${cell(b)} | ${ratio.toFixed(2)}x |`);
    }
  } finally {
    sb.close();
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

await main();
