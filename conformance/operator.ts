// The operator checks (operator.mjs) through Deno's built-in KV Connect client.
// @ts-ignore: a plain ES module without types
import { operatorChecks } from "./operator.mjs";

async function openKv(url: string, token: string): Promise<Deno.Kv> {
  Deno.env.set("DENO_KV_ACCESS_TOKEN", token);
  return await Deno.openKv(url);
}

Deno.exit(
  await operatorChecks({
    name: "deno",
    env: (key: string) => Deno.env.get(key),
    openKv,
    print: (line: string) => console.log(line),
  }),
);
