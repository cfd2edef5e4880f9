// Conformance cases through Deno's built-in KV Connect client.
// Run: CONFORMANCE_URL=http://127.0.0.1:PORT CONFORMANCE_TOKEN=T CONFORMANCE_SERVER=denokv \
//      deno run -A --unstable-kv conformance/deno.ts

// @ts-ignore: a plain ES module without types
import { drive } from "./driver.mjs";

/** Opens the database at `url` with `token` (Deno reads it from DENO_KV_ACCESS_TOKEN). */
async function openKv(url: string, token: string): Promise<Deno.Kv> {
  const previous = Deno.env.get("DENO_KV_ACCESS_TOKEN");
  Deno.env.set("DENO_KV_ACCESS_TOKEN", token);
  try {
    return await Deno.openKv(url);
  } finally {
    if (previous === undefined) Deno.env.delete("DENO_KV_ACCESS_TOKEN");
    else Deno.env.set("DENO_KV_ACCESS_TOKEN", previous);
  }
}

const code = await drive({
  name: "deno",
  env: (key: string) => Deno.env.get(key),
  openKv,
  KvU64: Deno.KvU64,
  isU64: (v: unknown) => v instanceof Deno.KvU64,
  print: (line: string) => console.log(line),
  warn: (line: string) => console.error(line),
});
Deno.exit(code);
