// Regenerates crates/jsvalue/tests/fixtures/v8_golden.json: every sample of v8_samples.mjs
// serialised by real Deno (what `kv.set` stores, read back from the SQLite file of
// `Deno.openKv(path)`) and by Node (`require("node:v8").serialize`). Run from the
// repository root with Deno 2.9.6 (`cargo xtask conformance` installs it into target/tools)
// and Node 20 on the PATH:
//   target/tools/deno-2.9.6/package/deno run -A --unstable-kv conformance/v8_golden.ts \
//     crates/jsvalue/tests/fixtures/v8_golden.json
import { DatabaseSync } from "node:sqlite";
import { evaluate, literalOf, samples } from "./v8_samples.mjs";

const out = Deno.args[0];
if (!out) throw new Error("usage: v8_golden.ts OUT.json");
const hex = (bytes: Uint8Array) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");

const dir = await Deno.makeTempDir();
const kv = await Deno.openKv(`${dir}/kv.sqlite3`);
for (const [i, sample] of samples.entries()) {
  await kv.set(["sample", i], evaluate(sample));
}
kv.close();
const db = new DatabaseSync(`${dir}/kv.sqlite3`);
const rows = db.prepare("SELECT v, v_encoding FROM kv ORDER BY version").all();
db.close();
await Deno.remove(dir, { recursive: true });
if (rows.length !== samples.length) throw new Error(`${rows.length} rows for ${samples.length} samples`);

const samplesUrl = new URL("./v8_samples.mjs", import.meta.url).href;
const nodeScript = `
  import { serialize } from "node:v8";
  import { evaluate, samples } from ${JSON.stringify(samplesUrl)};
  console.log(JSON.stringify(samples.map((s) => serialize(evaluate(s)).toString("hex"))));
`;
const node = await new Deno.Command("node", { args: ["--input-type=module", "-e", nodeScript] }).output();
if (!node.success) throw new Error(new TextDecoder().decode(node.stderr));
const nodeHex: string[] = JSON.parse(new TextDecoder().decode(node.stdout));
const nodeVersion = new TextDecoder().decode((await new Deno.Command("node", { args: ["--version"] }).output()).stdout).trim();

const fixture = {
  about: "V8 serialisations of conformance/v8_samples.mjs by real Deno and Node; regenerate with conformance/v8_golden.ts (see its header)",
  deno: Deno.version.deno,
  node: nodeVersion,
  samples: samples.map((s, i) => {
    const row = rows[i] as { v: Uint8Array; v_encoding: number };
    if (row.v_encoding !== 1) throw new Error(`${s.name}: Deno stored encoding ${row.v_encoding}, not V8`);
    const entry: Record<string, string> = { name: s.name, js: s.js, literal: literalOf(s) };
    if (s.literalNode) entry.literal_node = literalOf(s, "literalNode");
    entry.deno = hex(new Uint8Array(row.v));
    entry.node = nodeHex[i];
    return entry;
  }),
};
await Deno.writeTextFile(out, JSON.stringify(fixture, null, 1) + "\n");
console.log(`wrote ${samples.length} samples to ${out}`);
