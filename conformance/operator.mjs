// Operator features of `tuplekv serve`, through the real clients: a database per URL path
// (`Deno.openKv("http://host:port/NAME")`), each its own store, and two access tokens valid at
// once. The server runs with `--create-databases` and a second token, CONFORMANCE_TOKEN2.
// Run: CONFORMANCE_URL=... CONFORMANCE_TOKEN=T CONFORMANCE_TOKEN2=T2 deno run -A --unstable-kv \
//      conformance/operator.ts  (or NODE_KV_DIR=... node conformance/operator_node.mjs)

/** Runs the checks with `client`'s `openKv(url, token)`; returns the exit code. */
export async function operatorChecks({ name, env, openKv, print }) {
  const url = env("CONFORMANCE_URL");
  const token = env("CONFORMANCE_TOKEN");
  const token2 = env("CONFORMANCE_TOKEN2");
  const run = env("CONFORMANCE_RUN") ?? String(Date.now());
  let failed = 0;
  const check = (what, ok, detail = "") => {
    print(`${ok ? "ok" : "FAIL"} ${name} operator: ${what}${ok ? "" : ` ${detail}`}`);
    if (!ok) failed++;
  };

  const dbA = `${url}/conf-${name}-a-${run}`;
  const dbB = `${url}/conf-${name}-b-${run}`;
  const a = await openKv(dbA, token);
  const b = await openKv(dbB, token);
  const root = await openKv(url, token);
  const key = ["operator", name, run];
  await a.set(key, { in: "a", n: 1n });
  const fromA = await a.get(key);
  check("a named database reads its own write", fromA.value?.in === "a", String(fromA.value?.in));
  check("another named database does not see it", (await b.get(key)).value === null);
  check("the root database does not see it", (await root.get(key)).value === null);

  // An atomic check against the named database's own versionstamps.
  const stale = await b.atomic().check({ key, versionstamp: fromA.versionstamp }).set(key, "b").commit();
  check("a versionstamp of one database is not valid in another", stale.ok === false);
  const fresh = await a.atomic().check(fromA).set(key, { in: "a", n: 2n }).commit();
  check("a check on the named database's own entry commits", fresh.ok === true);
  const listed = [];
  for await (const e of a.list({ prefix: ["operator", name] })) listed.push(e.value);
  check("list sees the named database's entries", listed.length === 1 && listed[0].n === 2n);

  // The second token reaches the same data as the first.
  const a2 = await openKv(dbA, token2);
  check("a second valid token reads the same database", (await a2.get(key)).value?.n === 2n);
  let refused = false;
  try {
    const bad = await openKv(dbA, "not-a-valid-token-0000");
    await bad.get(key);
  } catch (_e) {
    refused = true;
  }
  check("a wrong token is refused", refused);

  // Queues: Deno's remote client refuses them before sending anything (docs/serve.md).
  let enqueueError = null;
  try {
    await root.enqueue({ job: 1 });
  } catch (e) {
    enqueueError = e;
  }
  if (name === "deno") {
    check("kv.enqueue is refused over KV Connect", enqueueError !== null);
  } else {
    print(`note ${name} operator: kv.enqueue ${enqueueError ? `refused (${enqueueError.message})` : "accepted"}`);
  }

  for (const kv of [a, b, root, a2]) kv.close();
  print(`${name} operator: ${failed === 0 ? "passed" : `${failed} failed`}`);
  return failed === 0 ? 0 : 1;
}
