// The part of the drivers both clients share: reading the environment, the three modes
// (cases, cross-write, cross-read) and the exit status.

import { NODE_TO_DENO_UNREADABLE, runCases, sampleValues } from "./cases.mjs";
import { attempt, Canon, freshPrefix } from "./lib.mjs";

/**
 * Runs the mode named by CONFORMANCE_MODE and returns the process exit code.
 * `client = { name, env(key), openKv(token), KvU64, isU64, print, warn }`.
 */
export async function drive(client) {
  const url = client.env("CONFORMANCE_URL");
  const token = client.env("CONFORMANCE_TOKEN");
  const server = client.env("CONFORMANCE_SERVER") ?? "tuplekv";
  const mode = client.env("CONFORMANCE_MODE") ?? "cases";
  if (!url || !token) {
    client.warn("set CONFORMANCE_URL (http://127.0.0.1:PORT) and CONFORMANCE_TOKEN");
    return 2;
  }
  if (server !== "tuplekv" && server !== "denokv") {
    client.warn(`CONFORMANCE_SERVER must be tuplekv or denokv, not ${server}`);
    return 2;
  }
  const kv = await client.openKv(url, token);
  try {
    if (mode === "cases") {
      const only = client.env("CONFORMANCE_ONLY")?.split(",") ?? null;
      const failures = await runCases({
        client: client.name,
        server,
        kv,
        KvU64: client.KvU64,
        isU64: client.isU64,
        openWithToken: (t) => client.openKv(url, t),
        prefix: freshPrefix(),
        print: client.print,
        warn: client.warn,
      }, only);
      if (failures.length > 0) {
        client.warn(`${client.name} against ${server}: ${failures.length} case(s) failed: ${failures.join(", ")}`);
        return 1;
      }
      client.warn(`${client.name} against ${server}: all cases passed`);
      return 0;
    }
    const prefix = client.env("CONFORMANCE_CROSS_PREFIX");
    if (!prefix) {
      client.warn("cross modes need CONFORMANCE_CROSS_PREFIX");
      return 2;
    }
    if (mode === "cross-write") return await crossWrite(client, kv, prefix);
    if (mode === "cross-read") return await crossRead(client, kv, prefix);
    client.warn(`unknown CONFORMANCE_MODE ${mode}`);
    return 2;
  } finally {
    kv.close();
  }
}

/** Writes the sample values under [prefix, "cross", name] and prints what was written. */
async function crossWrite(client, kv, prefix) {
  for (const [name, value] of Object.entries(sampleValues(client.KvU64))) {
    const canon = new Canon(prefix, client.isU64);
    const r = await attempt(() => kv.set([prefix, "cross", name], value));
    client.print(`cross.${name}: ${canon.json("ok" in r ? { wrote: value } : r)}`);
  }
  return 0;
}

/**
 * Reads the values another client wrote and compares them with the samples. With
 * CONFORMANCE_CROSS_STRICT=0 the differences are printed but do not fail (the direction the
 * V8 formats do not allow).
 */
async function crossRead(client, kv, prefix) {
  const strict = client.env("CONFORMANCE_CROSS_STRICT") !== "0";
  const failures = [];
  for (const [name, value] of Object.entries(sampleValues(client.KvU64))) {
    const canon = new Canon(prefix, client.isU64);
    const r = await attempt(async () => (await kv.get([prefix, "cross", name])).value);
    const observed = canon.json(r);
    client.print(`cross.${name}: ${observed}`);
    const expected = canon.json({ ok: value });
    const known = client.name === "deno" && NODE_TO_DENO_UNREADABLE.includes(name);
    if (observed !== expected && known) {
      client.warn(`note cross.${name}: known not to cross from Node to Deno: ${observed}`);
    } else if (observed !== expected) {
      client.warn(`${strict ? "FAIL" : "note"} cross.${name}: expected ${expected}, observed ${observed}`);
      failures.push(name);
    }
  }
  if (failures.length > 0 && strict) {
    client.warn(`${client.name} cross-read: ${failures.length} value(s) differ: ${failures.join(", ")}`);
    return 1;
  }
  client.warn(`${client.name} cross-read: ${failures.length} of the values differ${strict ? "" : " (recorded, not a failure)"}`);
  return 0;
}
