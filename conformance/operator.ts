// The operator checks (operator.mjs) through Deno's built-in KV Connect client.
// @ts-ignore: a plain ES module without types
import { operatorChecks } from "./operator.mjs";

async function openKv(url: string, token: string): Promise<Deno.Kv> {
  Deno.env.set("DENO_KV_ACCESS_TOKEN", token);
  return await Deno.openKv(url);
}

let code = await operatorChecks({
  name: "deno",
  env: (key: string) => Deno.env.get(key),
  openKv,
  print: (line: string) => console.log(line),
});

// DENO_KV_PATH_PREFIX (Deno 2.4.4 and later): `Deno.openKv("NAME")` opens PREFIX + NAME, so
// an app moves to a named database by environment alone.
const url = Deno.env.get("CONFORMANCE_URL")!;
const name = `conf-deno-prefix-${Deno.env.get("CONFORMANCE_RUN") ?? Date.now()}`;
Deno.env.set("DENO_KV_ACCESS_TOKEN", Deno.env.get("CONFORMANCE_TOKEN")!);
Deno.env.set("DENO_KV_PATH_PREFIX", `${url}/`);
const byPrefix = await Deno.openKv(name);
Deno.env.delete("DENO_KV_PATH_PREFIX");
await byPrefix.set(["via", "prefix"], 1);
const direct = await Deno.openKv(`${url}/${name}`);
const seen = (await direct.get(["via", "prefix"])).value === 1;
console.log(`${seen ? "ok" : "FAIL"} deno operator: DENO_KV_PATH_PREFIX opens the named database`);
if (!seen) code = 1;
byPrefix.close();
direct.close();
Deno.exit(code);
