// Deno client bench for a KV Connect server (`tuplekv serve`, `denokv`): how many operations per
// second the real Deno client gets from the server, and how long each one takes, in the shapes
// apps use.
//
//   DENO_KV_ACCESS_TOKEN=<token> deno run -A --unstable-kv bench/server/deno_bench.ts \
//       http://127.0.0.1:PORT [N] [WARMUP] [SECONDS]
//
// Ops, in run order, each after up to WARMUP unmeasured ones:
// - `set`, `get`, `cas` (get + check + set through `atomic().check(entry)`): sequential, a
//   100-byte Uint8Array, exactly N each; `set_concurrent_32`: N sets, 32 at a time.
// - `set_obj_<size>_seq`, `_c32`, `_c256`: `kv.set` of a JS object (id, name, email, tags and a
//   text body) whose V8 serialisation, as Deno stores it, is <size> bytes, for size in 100,
//   1024, 2048 (sequential only), 4096, 16384 and 65536 (made 65000 to stay under Deno's
//   65536-byte value limit). One in flight, or 32 or 256 at a time (`Promise.all` over batches
//   on the one `Deno.openKv(url)` connection). N ops (N/4 for 16 KiB and over), at least one
//   batch, and at most SECONDS seconds each (default 4): a server that takes 44 ms a write would
//   otherwise take minutes.
// - `app_insert_2k`: the secondary-index guide's insert, sequential: check that the email is
//   free, then set the ~2 KB user record and two index keys in one atomic commit. Same count
//   and time bound.
// - `large_concurrent_100`, `large_concurrent_200` (last, since a stalled server may not
//   recover): 100 and then 200 atomic writes at once, each of ten 60 000-byte Uint8Arrays
//   (~600 kB a write), as a library's bulk insert sends them. Each waits at most 60 s; a write
//   that has not finished by then makes the line say `"timed_out": true`, and the 200 are
//   skipped (`"skipped": true`) when the 100 timed out.
//
// Prints one JSON line per op on stdout: {"op", "n" (ops measured), "seconds", "ops_per_sec",
// "errors", "p50_us", "p99_us", "max_us" (each op's own latency, from just before it is issued
// to its result), "in_flight", "value_bytes"}; the large writes add "timed_out", "completed"
// and "skipped". Exits non-zero when the server cannot be reached or an op other than the
// large writes fails; the large writes' outcome is the line's to report, not the exit
// status's, so that a stall there still leaves every other line usable.

import { serialize } from "node:v8";

const CONCURRENT_BATCH = 32;
const N_DEFAULT = 2000;
const WARMUP_DEFAULT = 200;
const SECONDS_DEFAULT = 4;
const VALUE_SIZE = 100;
// Nominal object sizes, and whether each also runs 32 and 256 in flight.
const OBJECT_SIZES: [number, boolean][] = [
  [100, true],
  [1024, true],
  [2048, false],
  [4096, true],
  [16384, true],
  [65536, true],
];
// Batches of the concurrent object sets.
const IN_FLIGHT = [32, 256];
// Deno refuses values whose serialisation is over 65536 bytes; the "64 KiB" object keeps
// some room below that, as an app near the limit would.
const OBJECT_BYTES_MAX = 65000;
// Objects from this size on are written N/4 times: each op moves more data.
const LARGE_OBJECT = 16384;
// The serialised size of the user record of `app_insert_2k`.
const APP_USER_BYTES = 2048;
// The large concurrent writes: sets per atomic write, bytes per set, and how long all of them
// may take before the server counts as stalled.
const LARGE_SETS = 10;
const LARGE_VALUE_BYTES = 60_000;
const LARGE_COUNTS = [100, 200];
const LARGE_TIMEOUT_MS = 60_000;

function usage(message: string): never {
  console.error(`deno_bench: ${message}`);
  console.error("usage: deno run -A --unstable-kv deno_bench.ts http://HOST:PORT [N] [WARMUP] [SECONDS]");
  Deno.exit(2);
}

function count(arg: string | undefined, fallback: number, name: string): number {
  if (arg === undefined) return fallback;
  const n = Number(arg);
  if (!Number.isInteger(n) || n < 0 || n > 10_000_000) usage(`${name} must be a whole number, not ${arg}`);
  return n;
}

const [url, nArg, warmupArg, secondsArg] = Deno.args;
if (!url || !url.startsWith("http://")) usage("the first argument is the server's http:// URL");
if (!Deno.env.get("DENO_KV_ACCESS_TOKEN")) usage("set DENO_KV_ACCESS_TOKEN");
const N = count(nArg, N_DEFAULT, "N");
const WARMUP = count(warmupArg, WARMUP_DEFAULT, "WARMUP");
const SECONDS = secondsArg === undefined ? SECONDS_DEFAULT : Number(secondsArg);
if (N === 0) usage("N must be at least 1");
if (!(SECONDS > 0 && SECONDS <= 3600)) usage(`SECONDS must be a number of seconds, not ${secondsArg}`);

const kv = await Deno.openKv(url);
const value = new Uint8Array(VALUE_SIZE).fill(0x5a);

interface Result {
  op: string;
  n: number;
  seconds: number;
  ops_per_sec: number;
  errors: number;
  p50_us: number;
  p99_us: number;
  max_us: number;
  in_flight: number;
  value_bytes: number;
  timed_out?: boolean;
  completed?: number;
  skipped?: boolean;
}

// How many ops an op measures, for how long at most, and how much it moves.
interface Plan {
  // Ops measured (a concurrent op always measures at least one full batch).
  n: number;
  // Ops issued at once (1: sequential).
  inFlight: number;
  // Most seconds measured; warm-up gets a quarter of it. Undefined: no bound.
  seconds?: number;
  // Bytes of each value, as Deno serialises it.
  valueBytes: number;
}

// An op's result: false when it completed but did not do what it should. A thrown error
// counts as a failure too.
type Body = (i: number) => Promise<boolean>;

let firstError: string | undefined;
function noteError(op: string, e: unknown) {
  if (firstError === undefined) {
    firstError = `${op}: ${e instanceof Error ? e.message : String(e)}`;
    console.error(`deno_bench: ${firstError}`);
  }
}

// Runs `body(i)` once, adding its latency in ms to `latencies`; true when it succeeded.
async function timed(op: string, body: Body, i: number, latencies: number[]): Promise<boolean> {
  const start = performance.now();
  let ok = false;
  try {
    ok = await body(i);
  } catch (e) {
    noteError(op, e);
  }
  latencies.push(performance.now() - start);
  return ok;
}

// How long a batch may go without finishing before the bench calls the server stalled and
// exits (its earlier lines stand): a stalled server would otherwise hold the bench until the
// harness kills it.
const STALL_MS = 60_000;

// Runs ops [from, to) at once and returns how many failed.
async function batch(op: string, body: Body, from: number, to: number, latencies: number[]): Promise<number> {
  const ops = [];
  for (let i = from; i < to; i++) ops.push(timed(op, body, i, latencies));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stalled = new Promise<"stalled">((resolve) => {
    timer = setTimeout(() => resolve("stalled"), STALL_MS);
  });
  const outcome = await Promise.race([Promise.all(ops), stalled]);
  clearTimeout(timer);
  if (outcome === "stalled") {
    console.error(`deno_bench: ${op}: ${to - from} op(s) in flight got no answer in ${STALL_MS / 1000} s: the server stalled`);
    Deno.exit(1);
  }
  return outcome.filter((ok) => !ok).length;
}

// Runs `body(i)` for i in [0, WARMUP) unmeasured (or fewer, when a quarter of the plan's time
// runs out), then for i from WARMUP on, timed, `plan.inFlight` at a time, until `plan.n` ops
// are done or the plan's time runs out (checked between batches).
async function run(op: string, plan: Plan, body: Body): Promise<Result> {
  const warmupUntil = plan.seconds === undefined ? Infinity : performance.now() + plan.seconds * 250;
  for (let i = 0; i < WARMUP && performance.now() < warmupUntil; i += plan.inFlight) {
    await batch(op, body, i, Math.min(i + plan.inFlight, WARMUP), []);
  }
  const latencies: number[] = [];
  let errors = 0;
  let done = 0;
  const start = performance.now();
  const until = plan.seconds === undefined ? Infinity : start + plan.seconds * 1000;
  while (done < plan.n && (done === 0 || performance.now() < until)) {
    const size = Math.min(plan.inFlight, plan.n - done);
    errors += await batch(op, body, WARMUP + done, WARMUP + done + size, latencies);
    done += size;
  }
  return finish(op, plan, (performance.now() - start) / 1000, errors, latencies);
}

// The result line of `latencies.length` ops that took `seconds` in all.
function finish(op: string, plan: Plan, seconds: number, errors: number, latencies: number[]): Result {
  latencies.sort((a, b) => a - b);
  const us = (q: number) => {
    if (latencies.length === 0) return 0;
    const rank = Math.min(latencies.length, Math.max(1, Math.ceil(q * latencies.length)));
    return Math.round(latencies[rank - 1] * 1000);
  };
  return {
    op,
    n: latencies.length,
    seconds: Math.round(seconds * 1000) / 1000,
    ops_per_sec: seconds > 0 ? Math.round((latencies.length / seconds) * 10) / 10 : 0,
    errors,
    p50_us: us(0.5),
    p99_us: us(0.99),
    max_us: us(1),
    in_flight: plan.inFlight,
    value_bytes: plan.valueBytes,
  };
}

// A user record as an app stores it, with a text body that makes its V8 serialisation (what
// Deno sends and stores) exactly `bytes` long, where the fixed fields leave room.
function userObject(id: number, bytes: number) {
  // The fixed fields serialise to about 90 bytes, so that even the 100-byte object is one.
  const make = (body: number) => ({
    id: `u${String(id).padStart(8, "0")}`,
    name: `User ${id}`,
    email: `user${id}@example.com`,
    tags: ["customer"],
    body: "x".repeat(body),
  });
  // The body's length prefix is a varint, so its size can move by a byte or two as the body
  // grows: correct the guess until it lands.
  let body = Math.max(0, bytes - serialize(make(0)).length);
  for (let tries = 0; tries < 4; tries++) {
    const off = serialize(make(body)).length - bytes;
    if (off === 0 || body - off < 0) break;
    body -= off;
  }
  return make(body);
}

const results: Result[] = [];
const report = (r: Result) => {
  results.push(r);
  console.log(JSON.stringify(r));
};

const small: Plan = { n: N, inFlight: 1, valueBytes: VALUE_SIZE };

// Sequential set: keys ["bench", "set", i], which the get and CAS passes then read.
report(await run("set", small, async (i) => {
  const res = await kv.set(["bench", "set", i], value);
  return res.ok;
}));

report(await run("get", small, async (i) => {
  const entry = await kv.get(["bench", "set", i]);
  return entry.versionstamp !== null;
}));

// get + check + set: read the entry, then commit a set guarded by its versionstamp. Nobody
// else writes these keys, so every check must pass.
report(await run("cas", small, async (i) => {
  const key = ["bench", "set", i];
  const entry = await kv.get(key);
  const res = await kv.atomic().check(entry).set(key, value).commit();
  return res.ok;
}));

report(await run("set_concurrent_32", { ...small, inFlight: CONCURRENT_BATCH }, async (i) => {
  const res = await kv.set(["bench", "concurrent", i], value);
  return res.ok;
}));

// Objects by size: one object per size, written under a fresh key each time (an app writes
// different records, but their serialisation costs the same).
for (const [nominal, concurrent] of OBJECT_SIZES) {
  const bytes = Math.min(nominal, OBJECT_BYTES_MAX);
  const object = userObject(1, bytes);
  const valueBytes = serialize(object).length;
  const n = nominal >= LARGE_OBJECT ? Math.max(1, Math.floor(N / 4)) : N;
  const shapes: [string, number][] = [["seq", 1]];
  if (concurrent) for (const inFlight of IN_FLIGHT) shapes.push([`c${inFlight}`, inFlight]);
  for (const [shape, inFlight] of shapes) {
    const op = `set_obj_${nominal}_${shape}`;
    const plan = { n: Math.max(n, inFlight), inFlight, seconds: SECONDS, valueBytes };
    report(await run(op, plan, async (i) => {
      const res = await kv.set(["bench", op, i], object);
      return res.ok;
    }));
  }
}

// The secondary-index guide's insert: the record under its id and two index keys, committed
// only if no user has the email yet. Every email is new, so every commit must succeed.
{
  const user = userObject(1, APP_USER_BYTES);
  const valueBytes = serialize(user).length;
  const plan = { n: N, inFlight: 1, seconds: SECONDS, valueBytes };
  report(await run("app_insert_2k", plan, async (i) => {
    const id = `u${i}`;
    const email = `user${i}@example.com`;
    const name = `User ${i}`;
    const res = await kv.atomic()
      .check({ key: ["users_by_email", email], versionstamp: null })
      .set(["users", id], { ...user, id, email, name })
      .set(["users_by_email", email], id)
      .set(["users_by_name", name, id], id)
      .commit();
    return res.ok;
  }));
}

// `count` atomic writes at once, each of LARGE_SETS sets of `big`; every write is given at
// most LARGE_TIMEOUT_MS, after which the line reports how many had completed.
async function largeConcurrent(count: number, big: Uint8Array): Promise<Result> {
  const op = `large_concurrent_${count}`;
  const plan = { n: count, inFlight: count, valueBytes: LARGE_VALUE_BYTES * LARGE_SETS };
  const latencies: number[] = [];
  let errors = 0;
  const start = performance.now();
  const writes = [];
  for (let i = 0; i < count; i++) {
    writes.push(timed(op, async () => {
      let atomic = kv.atomic();
      // The same keys for every count: the 200 overwrite the 100, so an in-memory server
      // holds one round's data.
      for (let j = 0; j < LARGE_SETS; j++) atomic = atomic.set(["bench", "large", i, j], big);
      return (await atomic.commit()).ok;
    }, i, latencies).then((ok) => {
      if (!ok) errors++;
    }));
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timed out">((resolve) => {
    timer = setTimeout(() => resolve("timed out"), LARGE_TIMEOUT_MS);
  });
  const outcome = await Promise.race([Promise.all(writes).then(() => "done" as const), timeout]);
  clearTimeout(timer);
  const seconds = (performance.now() - start) / 1000;
  // Writes still pending after a timeout are neither latencies nor errors: `completed`
  // against `n` says how far the server got.
  const completed = latencies.length;
  return {
    ...finish(op, plan, seconds, errors, latencies),
    n: count,
    timed_out: outcome === "timed out",
    completed,
  };
}

// The large writes go last: a server that stalls on them may not answer anything after.
{
  const big = new Uint8Array(LARGE_VALUE_BYTES).fill(0x61);
  let stalled = false;
  for (const count of LARGE_COUNTS) {
    if (stalled) {
      // The server did not finish the smaller round: a larger one would only wait out its
      // timeout too.
      console.log(JSON.stringify({
        op: `large_concurrent_${count}`,
        n: count,
        seconds: 0,
        ops_per_sec: 0,
        errors: 0,
        p50_us: 0,
        p99_us: 0,
        max_us: 0,
        in_flight: count,
        value_bytes: LARGE_VALUE_BYTES * LARGE_SETS,
        timed_out: false,
        completed: 0,
        skipped: true,
      }));
      continue;
    }
    const r = await largeConcurrent(count, big);
    console.log(JSON.stringify(r));
    stalled = r.timed_out === true;
  }
}

const failed = results.filter((r) => r.errors > 0);
if (failed.length > 0) {
  console.error(`deno_bench: operations failed: ${failed.map((r) => `${r.op} x${r.errors}`).join(", ")}`);
}
// Exit explicitly: after a timed-out large write, requests are still pending on the
// connection, and closing it politely could wait on them.
try {
  kv.close();
} catch {
  // Already closing or broken: the exit below ends it either way.
}
Deno.exit(failed.length > 0 ? 1 : 0);
