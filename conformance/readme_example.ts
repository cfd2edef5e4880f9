const kv = await Deno.openKv("http://127.0.0.1:4512");
await kv.set(["users", 1n], { name: "Ada" });
const res = await kv.atomic().check({ key: ["users", 2n], versionstamp: null }).set(["users", 2n], { name: "Grace" }).commit();
console.log(res.ok, (await kv.get(["users", 1n])).value);
for await (const { key, value } of kv.list({ prefix: ["users"] })) console.log(key, value);
