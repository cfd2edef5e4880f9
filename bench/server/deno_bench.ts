// Deno client bench for a KV Connect server (`tuplekv serve`, `denokv`): how many operations per
// second the real Deno client gets from the server, one operation at a time and 32 at a time.
//
//   DENO_KV_ACCESS_TOKEN=<token> deno run -A --unstable-kv bench/server/deno_bench.ts \
//       http://127.0.0.1:PORT [N] [WARMUP]
//
// Ops, each N times after WARMUP unmeasured ones: sequential `set`, sequential `get`,
// sequential get + check + set (a compare-and-swap through `atomic().check(entry)`), and `set`
// 32 at a time (`Promise.all` over batches of 32). Prints one JSON line per op on stdout:
// {"op":"set","n":N,"seconds":S,"ops_per_sec":R,"errors":E}. Exits non-zero when the server
// cannot be reached or an operation fails.

const CONCURRENT_BATCH = 32;
const N_DEFAULT = 2000;
const WARMUP_DEFAULT = 200;
const VALUE_SIZE = 100;

function usage(message: string): never {
  console.error(`deno_bench: ${message}`);
  console.error("usage: deno run -A --unstable-kv deno_bench.ts http://HOST:PORT [N] [WARMUP]");
  Deno.exit(2);
}

function count(arg: string | undefined, fallback: number, name: string): number {
  if (arg === undefined) return fallback;
  const n = Number(arg);
  if (!Number.isInteger(n) || n < 0 || n > 10_000_000) usage(`${name} must be a whole number, not ${arg}`);
  return n;
}

const [url, nArg, warmupArg] = Deno.args;
if (!url || !url.startsWith("http://")) usage("the first argument is the server's http:// URL");
if (!Deno.env.get("DENO_KV_ACCESS_TOKEN")) usage("set DENO_KV_ACCESS_TOKEN");
const N = count(nArg, N_DEFAULT, "N");
const WARMUP = count(warmupArg, WARMUP_DEFAULT, "WARMUP");
if (N === 0) usage("N must be at least 1");

const kv = await Deno.openKv(url);
const value = new Uint8Array(VALUE_SIZE).fill(0x5a);

interface Result {
  op: string;
  n: number;
  seconds: number;
  ops_per_sec: number;
  errors: number;
}

// Runs `body(i)` for i in [0, WARMUP) unmeasured, then for i in [WARMUP, WARMUP + N) timed.
// `body` returns false for an operation that completed but did not do what it should.
async function sequential(op: string, body: (i: number) => Promise<boolean>): Promise<Result> {
  for (let i = 0; i < WARMUP; i++) await body(i);
  let errors = 0;
  const start = performance.now();
  for (let i = WARMUP; i < WARMUP + N; i++) {
    if (!(await body(i))) errors++;
  }
  return finish(op, start, errors);
}

// Like `sequential`, but issues CONCURRENT_BATCH operations at once and waits for all of them.
async function batched(op: string, body: (i: number) => Promise<boolean>): Promise<Result> {
  const batch = async (from: number, to: number) => {
    const ops = [];
    for (let i = from; i < to; i++) ops.push(body(i));
    return (await Promise.all(ops)).filter((ok) => !ok).length;
  };
  for (let i = 0; i < WARMUP; i += CONCURRENT_BATCH) await batch(i, Math.min(i + CONCURRENT_BATCH, WARMUP));
  let errors = 0;
  const start = performance.now();
  for (let i = WARMUP; i < WARMUP + N; i += CONCURRENT_BATCH) {
    errors += await batch(i, Math.min(i + CONCURRENT_BATCH, WARMUP + N));
  }
  return finish(op, start, errors);
}

function finish(op: string, start: number, errors: number): Result {
  const seconds = (performance.now() - start) / 1000;
  return {
    op,
    n: N,
    seconds: Math.round(seconds * 1000) / 1000,
    ops_per_sec: Math.round((N / seconds) * 10) / 10,
    errors,
  };
}

const results: Result[] = [];
const report = (r: Result) => {
  results.push(r);
  console.log(JSON.stringify(r));
};

// Sequential set: keys ["bench", "set", i], which the get and CAS passes then read.
report(await sequential("set", async (i) => {
  const res = await kv.set(["bench", "set", i], value);
  return res.ok;
}));

report(await sequential("get", async (i) => {
  const entry = await kv.get(["bench", "set", i]);
  return entry.versionstamp !== null;
}));

// get + check + set: read the entry, then commit a set guarded by its versionstamp. Nobody
// else writes these keys, so every check must pass.
report(await sequential("cas", async (i) => {
  const key = ["bench", "set", i];
  const entry = await kv.get(key);
  const res = await kv.atomic().check(entry).set(key, value).commit();
  return res.ok;
}));

report(await batched("set_concurrent_32", async (i) => {
  const res = await kv.set(["bench", "concurrent", i], value);
  return res.ok;
}));

kv.close();
const failed = results.filter((r) => r.errors > 0);
if (failed.length > 0) {
  console.error(`deno_bench: operations failed: ${failed.map((r) => `${r.op} x${r.errors}`).join(", ")}`);
  Deno.exit(1);
}
