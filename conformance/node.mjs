// Conformance cases through Node's @deno/kv client (pure JS over fetch, HTTP/1.1).
// Run: CONFORMANCE_URL=http://127.0.0.1:PORT CONFORMANCE_TOKEN=T CONFORMANCE_SERVER=denokv \
//      NODE_KV_DIR=<dir with node_modules/@deno/kv> node conformance/node.mjs
// Without NODE_KV_DIR, @deno/kv is resolved from this directory (after `npm ci` here).

import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { drive } from "./driver.mjs";

const base = process.env.NODE_KV_DIR
  ? pathToFileURL(`${process.env.NODE_KV_DIR}/`)
  : new URL("./", import.meta.url);
const entry = createRequire(new URL("package.json", base)).resolve("@deno/kv");
// The CommonJS entry resolves through `require`; import the ESM build next to it instead.
const { openKv, KvU64 } = await import(pathToFileURL(entry.replace(/\/script\/npm\.js$/, "/esm/npm.js")).href);

// @deno/kv can reject promises nobody awaits (a watch request the server refuses); report them
// instead of letting Node exit in the middle of the run.
process.on("unhandledRejection", (e) => console.error(`note: unhandled rejection in @deno/kv: ${e?.message ?? e}`));

const code = await drive({
  name: "node",
  env: (key) => process.env[key],
  openKv: (url, token) => openKv(url, { accessToken: token }),
  KvU64,
  isU64: (v) => v instanceof KvU64,
  print: (line) => console.log(line),
  warn: (line) => console.error(line),
});
process.exit(code);
