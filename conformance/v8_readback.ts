// Step `cli-values-deno-read` of `cargo xtask conformance`: the tuplekv CLI writes every
// sample of v8_samples.mjs with `tuplekv set --url … --js @FILE` (its literal, the token from
// DENO_KV_ACCESS_TOKEN), then Deno reads each key and compares it deeply with the sample's
// JavaScript evaluated: same types, Date times, Map and Set entries in order, typed array
// kinds and bytes, -0, NaN, bigints, holes, extra properties and shared references. Any
// difference, or a failed write, fails the step.
// Environment: CONFORMANCE_URL, CONFORMANCE_TOKEN, TUPLEKV_BIN.
import { evaluate, literalOf, samples } from "./v8_samples.mjs";

const url = Deno.env.get("CONFORMANCE_URL")!;
const token = Deno.env.get("CONFORMANCE_TOKEN")!;
const bin = Deno.env.get("TUPLEKV_BIN")!;
const prefix = `cli-values-${Date.now()}`;
// One more than the samples: a top-level Uint8Array, which Deno stores as bytes.
const all = [...samples, { name: "top-level-uint8array", js: "new Uint8Array([1, 2, 3])", literal: "new Uint8Array([1, 2, 3])" }];

/** Why `a` and `b` differ, or null; `pairs` maps objects of `a` to those of `b` (identity). */
function diff(a: unknown, b: unknown, path: string, pairs: Map<unknown, unknown>): string | null {
  if (typeof a !== typeof b) return `${path}: ${typeof a} vs ${typeof b}`;
  if (typeof a !== "object" || a === null || b === null) {
    return Object.is(a, b) ? null : `${path}: ${String(a)} vs ${String(b)}`;
  }
  if (pairs.has(a)) return pairs.get(a) === b ? null : `${path}: a shared reference is not shared`;
  pairs.set(a, b);
  const pa = Object.getPrototypeOf(a), pb = Object.getPrototypeOf(b);
  if (pa !== pb) return `${path}: ${pa?.constructor?.name} vs ${pb?.constructor?.name}`;
  if (a instanceof Date) return Object.is(a.getTime(), (b as Date).getTime()) ? null : `${path}: date ${a.getTime()} vs ${(b as Date).getTime()}`;
  if (a instanceof RegExp) return a.source === (b as RegExp).source && a.flags === (b as RegExp).flags ? null : `${path}: ${a} vs ${b}`;
  if (a instanceof ArrayBuffer) return bytesDiff(new Uint8Array(a), new Uint8Array(b as ArrayBuffer), path);
  if (ArrayBuffer.isView(a)) {
    const vb = b as ArrayBufferView;
    if (a.byteOffset !== vb.byteOffset || a.byteLength !== vb.byteLength) return `${path}: view range differs`;
    return diff(a.buffer, vb.buffer, `${path}.buffer`, pairs);
  }
  if (a instanceof Map) {
    const ea = [...a], eb = [...(b as Map<unknown, unknown>)];
    if (ea.length !== eb.length) return `${path}: map size ${ea.length} vs ${eb.length}`;
    for (let i = 0; i < ea.length; i++) {
      const d = diff(ea[i][0], eb[i][0], `${path}[key ${i}]`, pairs) ?? diff(ea[i][1], eb[i][1], `${path}[value ${i}]`, pairs);
      if (d) return d;
    }
    return null;
  }
  if (a instanceof Set) return diff([...a], [...(b as Set<unknown>)], `${path}[set]`, new Map(pairs));
  if (a instanceof Number || a instanceof String || a instanceof Boolean || a instanceof BigInt) {
    return Object.is(a.valueOf(), (b as Number).valueOf()) ? null : `${path}: boxed ${a} vs ${b}`;
  }
  if (Array.isArray(a) && a.length !== (b as unknown[]).length) return `${path}: length ${a.length} vs ${(b as unknown[]).length}`;
  const ka = Reflect.ownKeys(a), kb = Reflect.ownKeys(b as object);
  if (ka.join("\u0000") !== kb.join("\u0000")) return `${path}: keys [${ka.map(String)}] vs [${kb.map(String)}]`;
  for (const k of ka) {
    if (Array.isArray(a) && k === "length") continue;
    const d = diff((a as Record<PropertyKey, unknown>)[k], (b as Record<PropertyKey, unknown>)[k], `${path}.${String(k)}`, pairs);
    if (d) return d;
  }
  return null;
}

function bytesDiff(a: Uint8Array, b: Uint8Array, path: string): string | null {
  if (a.length !== b.length) return `${path}: ${a.length} bytes vs ${b.length}`;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return `${path}: byte ${i} differs`;
  return null;
}

const dir = await Deno.makeTempDir();
let failed = 0;
for (const sample of all) {
  const file = `${dir}/${sample.name}.js`;
  await Deno.writeTextFile(file, literalOf(sample));
  const key = JSON.stringify(["cli-values", prefix, sample.name]);
  const out = await new Deno.Command(bin, {
    args: ["set", "--url", url, key, "--js", `@${file}`],
    env: { DENO_KV_ACCESS_TOKEN: token, TUPLEKV_ACCESS_TOKEN: "" },
    clearEnv: false,
  }).output();
  if (!out.success) {
    console.error(`FAIL ${sample.name}: tuplekv set: ${new TextDecoder().decode(out.stderr)}`);
    failed++;
  }
}
await Deno.remove(dir, { recursive: true });
const kv = await Deno.openKv(url);
for (const sample of all) {
  const got = await kv.get(["cli-values", prefix, sample.name]);
  const d = got.versionstamp === null ? "absent" : diff(evaluate(sample), got.value, sample.name, new Map());
  if (d) {
    console.error(`FAIL ${sample.name}: ${d}`);
    failed++;
  } else {
    console.log(`${sample.name}: same`);
  }
}
kv.close();
if (failed) {
  console.error(`${failed} of ${all.length} samples differ`);
  Deno.exit(1);
}
console.log(`all ${all.length} samples read back equal`);
