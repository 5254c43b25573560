// Seeded fault injection shared by the emulators.
//
// SPEC is a comma-separated list of `key=value` or bare flags, e.g.
//   seed=7,cut=0.02,http5xx=0.1,slow=0.1
//   seed=N     PRNG seed (default 1). Each fault kind draws from its own
//              generator (seeded from seed and the kind's name), so enabling one
//              kind does not change another kind's sequence. Runs are
//              reproducible as long as the requests arrive in the same order.
//   cut=P      per output data event/frame: write a partial envelope/frame, then
//              destroy the connection.
//   http5xx=P  per request (non-streaming request, new stream, new exec): answer
//              502 or 503 (alternating, starting with 502) instead.
//   slow=P     per request: delay the response by 1-3 s (uniform, seeded).
//   noclose=P  (kubernetes) per exec: at the end, close the TCP connection
//              without a status frame and without a WebSocket close frame.
//   v4only     (kubernetes) negotiate v4.channel.k8s.io even when v5 is offered.
// Probabilities are numbers in [0, 1]; 1 means always.

function hashName(name) {
  let h = 2166136261;
  for (const c of name) h = Math.imul(h ^ c.charCodeAt(0), 16777619) >>> 0;
  return h;
}

// mulberry32: small, fast, good enough for test fault schedules.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class Faults {
  // kinds: the probability kinds this emulator supports; flags: the bare flags.
  constructor(spec, { kinds, flags }) {
    this.seed = 1;
    this.p = Object.fromEntries(kinds.map((k) => [k, 0]));
    this.flags = Object.fromEntries(flags.map((f) => [f, false]));
    this.count = Object.fromEntries(kinds.map((k) => [k, 0]));
    for (const item of (spec ?? '').split(',').map((s) => s.trim()).filter(Boolean)) {
      const eq = item.indexOf('=');
      const key = eq < 0 ? item : item.slice(0, eq);
      const value = eq < 0 ? undefined : item.slice(eq + 1);
      if (key === 'seed') {
        if (!/^\d+$/.test(value ?? '')) throw new Error(`--faults: seed must be a non-negative integer, got '${value}'`);
        this.seed = Number(value);
      } else if (key in this.p) {
        const p = Number(value);
        if (value === undefined || value === '' || !Number.isFinite(p) || p < 0 || p > 1) {
          throw new Error(`--faults: ${key} must be a probability in [0, 1], got '${value}'`);
        }
        this.p[key] = p;
      } else if (key in this.flags) {
        if (value !== undefined) throw new Error(`--faults: ${key} takes no value`);
        this.flags[key] = true;
      } else {
        throw new Error(`--faults: unknown fault '${key}' (known: seed, ${[...kinds, ...flags].join(', ')})`);
      }
    }
    this.rngs = Object.fromEntries(kinds.map((k) => [k, rng(this.seed ^ hashName(k))]));
    this.delayRng = rng(this.seed ^ hashName('slow-delay'));
    this.next5xx = 502;
  }

  // True when fault `kind` fires now (draws only when the probability is > 0).
  roll(kind) {
    const p = this.p[kind];
    if (!p) return false;
    const hit = p >= 1 || this.rngs[kind]() < p;
    if (hit) this.count[kind]++;
    return hit;
  }

  flag(name) { return this.flags[name]; }

  // The delay of a `slow` fault, 1000-3000 ms.
  slowDelayMs() { return 1000 + Math.floor(this.delayRng() * 2000); }

  // 502 and 503 alternate.
  status5xx() {
    const s = this.next5xx;
    this.next5xx = s === 502 ? 503 : 502;
    return s;
  }

  describe() {
    const on = Object.entries(this.p).filter(([, p]) => p > 0).map(([k, p]) => `${k}=${p}`);
    on.push(...Object.entries(this.flags).filter(([, v]) => v).map(([k]) => k));
    return on.length ? `seed=${this.seed},${on.join(',')}` : 'none';
  }
}
