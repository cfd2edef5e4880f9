// The operator checks (operator.mjs) through Node's @deno/kv client.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { operatorChecks } from "./operator.mjs";

const base = process.env.NODE_KV_DIR
  ? pathToFileURL(`${process.env.NODE_KV_DIR}/`)
  : new URL("./", import.meta.url);
const entry = createRequire(new URL("package.json", base)).resolve("@deno/kv");
const { openKv } = await import(pathToFileURL(entry.replace(/\/script\/npm\.js$/, "/esm/npm.js")).href);

process.exit(
  await operatorChecks({
    name: "node",
    env: (key) => process.env[key],
    openKv: (url, token) => openKv(url, { accessToken: token }),
    print: (line) => console.log(line),
  }),
);
