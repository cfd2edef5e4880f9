// Shared helpers for the conformance scripts: canonical JSON of observed results, error capture,
// and the small assertion vocabulary the cases use. Runs unchanged under Deno and Node.

/** A fresh key prefix per run, so a script can run twice against one server. */
export function freshPrefix() {
  const rand = Math.floor(Math.random() * 0xffffffff).toString(16).padStart(8, "0");
  return `cf-${Date.now().toString(36)}-${rand}`;
}

const VERSIONSTAMP = /^[0-9a-f]{20}$/;

/**
 * Turns observed values into canonical JSON: sorted object keys, typed values tagged
 * (`$bigint`, `$bytes`, `$u64`, `$date`, `$map`, `$set`, ...), versionstamps replaced by
 * `vs#1`, `vs#2`, ... in order of first appearance, the run's key prefix replaced by `$P`, and
 * loopback ports replaced by `PORT` (error messages quote the request URL).
 */
export class Canon {
  constructor(prefix, isU64) {
    this.prefix = prefix;
    this.isU64 = isU64;
    this.stamps = new Map();
  }

  /** The placeholder for a versionstamp, allocated on first sight. */
  stamp(vs) {
    if (!this.stamps.has(vs)) this.stamps.set(vs, `vs#${this.stamps.size + 1}`);
    return this.stamps.get(vs);
  }

  /** A string with the volatile parts (prefix, port, versionstamps) replaced. */
  text(s) {
    if (VERSIONSTAMP.test(s)) return this.stamp(s);
    let out = s.split(this.prefix).join("$P");
    out = out.replace(/127\.0\.0\.1:\d+/g, "127.0.0.1:PORT");
    out = out.replace(/\b[0-9a-f]{20}\b/g, (m) => this.stamp(m));
    return out;
  }

  /** A JSON-compatible tree for `v`. */
  tree(v) {
    if (v === null) return null;
    switch (typeof v) {
      case "undefined":
        return { $undefined: true };
      case "boolean":
        return v;
      case "string":
        return this.text(v);
      case "bigint":
        return { $bigint: v.toString() };
      case "number":
        if (Number.isNaN(v)) return { $number: "NaN" };
        if (!Number.isFinite(v)) return { $number: v > 0 ? "Infinity" : "-Infinity" };
        if (Object.is(v, -0)) return { $number: "-0" };
        return v;
      case "symbol":
        return { $symbol: String(v.description) };
      case "function":
        return { $function: v.name };
    }
    if (this.isU64(v)) return { $u64: v.value.toString() };
    if (v instanceof Error) {
      return { $error: v.name, message: this.text(String(v.message)) };
    }
    if (v instanceof Uint8Array && v.constructor.name !== "Buffer") {
      return { $bytes: hex(v) };
    }
    if (typeof Buffer !== "undefined" && v instanceof Buffer) {
      return { $bytes: hex(new Uint8Array(v)) };
    }
    if (ArrayBuffer.isView(v)) {
      return { $typed: v.constructor.name, v: Array.from(v, (x) => this.tree(x)) };
    }
    if (v instanceof ArrayBuffer) return { $arraybuffer: hex(new Uint8Array(v)) };
    if (v instanceof Date) {
      return { $date: Number.isNaN(v.getTime()) ? "invalid" : v.toISOString() };
    }
    if (v instanceof Map) {
      return { $map: Array.from(v, ([k, x]) => [this.tree(k), this.tree(x)]) };
    }
    if (v instanceof Set) return { $set: Array.from(v, (x) => this.tree(x)) };
    if (v instanceof RegExp) return { $regexp: String(v) };
    if (Array.isArray(v)) return v.map((x) => this.tree(x));
    const out = {};
    for (const k of Object.keys(v).sort()) out[this.text(k)] = this.tree(v[k]);
    return out;
  }

  /** Canonical JSON text of `v`. */
  json(v) {
    return stringify(this.tree(v));
  }
}

/** JSON with object keys sorted at every level (trees from Canon are already sorted). */
export function stringify(tree) {
  if (tree === null || typeof tree !== "object") return JSON.stringify(tree);
  if (Array.isArray(tree)) return `[${tree.map(stringify).join(",")}]`;
  const keys = Object.keys(tree).sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${stringify(tree[k])}`).join(",")}}`;
}

/** Lowercase hex of bytes. */
export function hex(bytes) {
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Runs `fn` and returns `{ ok: value }` or `{ error: { name, message } }`; never throws. */
export async function attempt(fn) {
  try {
    return { ok: await fn() };
  } catch (e) {
    return { error: { name: e?.name ?? "unknown", message: String(e?.message ?? e) } };
  }
}

/** Resolves with `promise`'s value, or rejects after `ms` with a message naming `what`. */
export function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Sleeps `ms` milliseconds. */
export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * The prefixes each client puts before a KV Connect server's refusal, given its HTTP status:
 * Deno's data path (`KV Connect failed to call 'URL' (status=400 Bad Request): TEXT`) and its
 * metadata exchange (`... responded with status 401 Unauthorized: TEXT`); @deno/kv's
 * `Unexpected response status: 400 TEXT` for both. A client's own refusal carries none of them.
 */
const REFUSAL_PREFIXES = {
  deno: (status) => [
    `KV Connect failed to call '[^']*' \\(status=${status}\\b[^)]*\\): `,
    `responded with status ${status}\\b[^:]*: `,
  ],
  node: (status) => [`Unexpected response status: ${status} `],
};

/**
 * A pattern matching `client`'s report of a server refusal with HTTP `status` whose text
 * (after the status) matches `text`, and nothing the client says on its own.
 */
export function serverRefusal(client, status, text) {
  const prefixes = REFUSAL_PREFIXES[client];
  if (!prefixes) throw new Error(`no refusal format known for client ${client}`);
  return new RegExp(`(?:${prefixes(status).join("|")}).*(?:${text.source})`, text.flags);
}

/** A mismatch between what a case observed and what it expected. */
export class Mismatch extends Error {
  constructor(message) {
    super(message);
    this.name = "Mismatch";
  }
}

/**
 * The assertion vocabulary handed to each case. `canon` turns values into canonical JSON so
 * that comparisons ignore versionstamp values but not their equality pattern.
 */
export class Expect {
  constructor(canon, client) {
    this.canon = canon;
    this.client = client;
  }

  /** `actual` and `expected` have the same canonical JSON. */
  eq(actual, expected, what = "value") {
    const a = this.canon.json(actual);
    const e = this.canon.json(expected);
    if (a !== e) throw new Mismatch(`${what}: expected ${e}, observed ${a}`);
  }

  /** `cond` holds. */
  that(cond, what) {
    if (!cond) throw new Mismatch(what);
  }

  /** `result` (from `attempt`) succeeded; returns its value. */
  ok(result, what = "operation") {
    if ("error" in result) {
      throw new Mismatch(`${what}: expected success, got ${result.error.name}: ${result.error.message}`);
    }
    return result.ok;
  }

  /** `result` (from `attempt`) failed with a message matching `pattern`. */
  error(result, pattern, what = "operation") {
    if (!("error" in result)) {
      throw new Mismatch(`${what}: expected an error matching ${pattern}, got success ${this.canon.json(result.ok)}`);
    }
    if (!pattern.test(result.error.message)) {
      throw new Mismatch(`${what}: error ${JSON.stringify(result.error.message)} does not match ${pattern}`);
    }
  }

  /**
   * `result` (from `attempt`) failed because the server refused the request: HTTP `status`
   * and a message matching `text`, as this client reports a server's answer. A refusal the
   * client makes itself, before sending, does not pass.
   */
  refused(result, status, text, what = "operation") {
    this.error(result, serverRefusal(this.client, status, text), `${what} (refused by the server)`);
  }

  /** The first of `alternatives` (functions that throw on mismatch) that passes. */
  oneOf(...alternatives) {
    const failures = [];
    for (const alt of alternatives) {
      try {
        alt();
        return;
      } catch (e) {
        if (!(e instanceof Mismatch)) throw e;
        failures.push(e.message);
      }
    }
    throw new Mismatch(failures.join(" / or: "));
  }
}
