// The sample values of the V8-format checks, one list for three uses:
// - v8_golden.ts has real Deno (kv.set) and Node (v8.serialize) serialise each `js`, into
//   crates/jsvalue/tests/fixtures/v8_golden.json;
// - the jsvalue tests decode those bytes and expect `literal` (`literalNode` where Node's
//   bytes mean something else: Node copies a typed array's bytes, not its whole buffer), and
//   encode `literal` back to exactly Deno's bytes;
// - `cargo xtask conformance` writes each `literal` with `tuplekv set --js` through a server
//   and has Deno compare what it reads with `js` evaluated (v8_readback.ts).
// `js` is a JavaScript expression; `literal` the tuplekv CLI's view of it (a string, or a
// function of the value for the long ones).
const quoted = (v) => JSON.stringify(v);
const bigint = (v) => `${v}n`;

export const samples = [
  { name: "undefined", js: "undefined", literal: "undefined" },
  { name: "null", js: "null", literal: "null" },
  { name: "true", js: "true", literal: "true" },
  { name: "false", js: "false", literal: "false" },
  { name: "smi", js: "42", literal: "42" },
  { name: "smi-negative", js: "-7", literal: "-7" },
  { name: "smi-max", js: "2147483647", literal: "2147483647" },
  { name: "smi-min", js: "-2147483648", literal: "-2147483648" },
  { name: "past-smi", js: "2147483648", literal: "2147483648" },
  { name: "double", js: "1.5", literal: "1.5" },
  { name: "minus-zero", js: "-0", literal: "-0" },
  { name: "nan", js: "NaN", literal: "NaN" },
  { name: "infinity", js: "Infinity", literal: "Infinity" },
  { name: "minus-infinity", js: "-Infinity", literal: "-Infinity" },
  { name: "exponent", js: "1e21", literal: "1e+21" },
  { name: "tiny", js: "5e-324", literal: "5e-324" },
  { name: "bigint-zero", js: "0n", literal: "0n" },
  { name: "bigint-negative", js: "-1n", literal: "-1n" },
  { name: "bigint-two-words", js: "12345678901234567890123n", literal: "12345678901234567890123n" },
  { name: "bigint-big", js: "-(2n ** 300n) + 1n", literal: bigint },
  { name: "string", js: '"Ada"', literal: '"Ada"' },
  { name: "string-empty", js: '""', literal: '""' },
  { name: "string-latin1", js: '"héllo ÿ"', literal: '"héllo ÿ"' },
  { name: "string-two-byte", js: '"a😮b"', literal: '"a😮b"' },
  { name: "string-cjk", js: '"日本"', literal: '"日本"' },
  { name: "string-padded", js: '"😮".repeat(40)', literal: quoted },
  { name: "string-lone-surrogate", js: '"\\ud800x"', literal: '"\\uD800x"' },
  { name: "string-escapes", js: '"line\\nbreak\\t\\"q\\" \\\\ \\x01"', literal: '"line\\nbreak\\t\\"q\\" \\\\ \\x01"' },
  { name: "string-64k", js: '"x".repeat(65530)', literal: quoted },
  { name: "string-two-byte-long", js: '"é😮".repeat(10000)', literal: quoted },
  { name: "object", js: '{ name: "Ada" }', literal: '{ name: "Ada" }' },
  { name: "object-empty", js: "{}", literal: "{}" },
  { name: "object-key-order", js: '{ 2: 1, b: 2, 1: 3, "x y": 4 }', literal: '{ 1: 3, 2: 1, b: 2, "x y": 4 }' },
  { name: "object-keys-quoted", js: '{ "é": 1, ["__proto__"]: 2, "": 3 }', literal: '{ "é": 1, ["__proto__"]: 2, "": 3 }' },
  { name: "object-two-byte-value", js: '{ k: "😮" }', literal: '{ k: "😮" }' },
  { name: "nested", js: "{ a: { b: [1, { c: null }] } }", literal: "{ a: { b: [1, { c: null }] } }" },
  { name: "array", js: "[1, 2, 3]", literal: "[1, 2, 3]" },
  { name: "array-empty", js: "[]", literal: "[]" },
  { name: "array-doubles", js: "[1.5, 2]", literal: "[1.5, 2]" },
  { name: "array-mixed", js: '[1, "a", 1.5]', literal: '[1, "a", 1.5]' },
  { name: "array-nan-minus-zero", js: "[NaN, -0]", literal: "[NaN, -0]" },
  { name: "array-holey", js: "[1, , 3]", literal: "[1, , 3]" },
  { name: "array-one-hole", js: "[,]", literal: "[,]" },
  { name: "array-trailing-hole", js: "[1, ,]", literal: "[1, ,]" },
  { name: "array-sparse", js: '(() => { const a = []; a[5000] = "x"; a.foo = 1; return a; })()', literal: 'Object.assign(new Array(5001), { 5000: "x", foo: 1 })' },
  { name: "array-extra-property", js: '(() => { const a = [1, 2]; a.foo = "x"; return a; })()', literal: 'Object.assign([1, 2], { foo: "x" })' },
  { name: "date", js: "new Date(0)", literal: 'new Date("1970-01-01T00:00:00.000Z")' },
  { name: "date-ms", js: 'new Date("2024-02-29T12:34:56.789Z")', literal: 'new Date("2024-02-29T12:34:56.789Z")' },
  { name: "date-before-1970", js: "new Date(-1)", literal: 'new Date("1969-12-31T23:59:59.999Z")' },
  { name: "date-invalid", js: "new Date(NaN)", literal: "new Date(NaN)" },
  { name: "date-far", js: "new Date(8.64e15)", literal: "new Date(8640000000000000)" },
  { name: "regexp", js: "/a\\/b/gimsuyd", literal: "/a\\/b/dgimsuy" },
  { name: "regexp-class", js: "/[/]x/u", literal: "/[/]x/u" },
  { name: "regexp-empty", js: 'new RegExp("")', literal: "/(?:)/" },
  { name: "map", js: 'new Map([[1, "a"], ["k", { v: true }]])', literal: 'new Map([[1, "a"], ["k", { v: true }]])' },
  { name: "map-empty", js: "new Map()", literal: "new Map()" },
  { name: "set", js: 'new Set(["a", 1])', literal: 'new Set(["a", 1])' },
  { name: "set-empty", js: "new Set()", literal: "new Set()" },
  { name: "array-buffer", js: "new Uint8Array([1, 2, 3]).buffer", literal: "new Uint8Array([1, 2, 3]).buffer" },
  { name: "array-buffer-zeros", js: "new ArrayBuffer(4)", literal: "new ArrayBuffer(4)" },
  { name: "uint8array-in-array", js: "[new Uint8Array([1, 2, 3])]", literal: "[new Uint8Array([1, 2, 3])]" },
  { name: "int8array", js: "new Int8Array([-1, 127])", literal: "new Int8Array([-1, 127])" },
  { name: "uint8clampedarray", js: "new Uint8ClampedArray([0, 255])", literal: "new Uint8ClampedArray([0, 255])" },
  { name: "int16array", js: "new Int16Array([-2])", literal: "new Int16Array([-2])" },
  { name: "uint16array", js: "new Uint16Array([1, 65535])", literal: "new Uint16Array([1, 65535])" },
  { name: "int32array", js: "new Int32Array([-5, 7])", literal: "new Int32Array([-5, 7])" },
  { name: "uint32array", js: "new Uint32Array([4294967295])", literal: "new Uint32Array([4294967295])" },
  { name: "float32array", js: "new Float32Array([1.5, 0.1])", literal: "new Float32Array([1.5, 0.1])" },
  { name: "float64array", js: "new Float64Array([1.5, NaN, -0])", literal: "new Float64Array([1.5, NaN, -0])" },
  { name: "bigint64array", js: "new BigInt64Array([-1n, 5n])", literal: "new BigInt64Array([-1n, 5n])" },
  { name: "biguint64array", js: "new BigUint64Array([18446744073709551615n])", literal: "new BigUint64Array([18446744073709551615n])" },
  { name: "dataview", js: "new DataView(new Uint8Array([1, 2]).buffer)", literal: "new DataView(new Uint8Array([1, 2]).buffer)" },
  {
    name: "views-sharing-a-buffer",
    js: "(() => { const b = new Uint8Array([0, 1, 2, 3, 4, 5, 6, 7]).buffer; return [new Uint8Array(b, 2, 3), new DataView(b, 4)]; })()",
    literal: "[new Uint8Array(&1 new Uint8Array([0, 1, 2, 3, 4, 5, 6, 7]).buffer, 2, 3), new DataView(*1, 4, 4)]",
    literalNode: "[new Uint8Array([2, 3, 4]), new DataView(new Uint8Array([4, 5, 6, 7]).buffer)]",
  },
  { name: "boxed-number", js: "new Number(1)", literal: "new Number(1)" },
  { name: "boxed-string", js: 'new String("ab")', literal: 'new String("ab")' },
  { name: "boxed-boolean", js: "new Boolean(false)", literal: "new Boolean(false)" },
  { name: "boxed-bigint", js: "Object(1n)", literal: "Object(1n)" },
  { name: "shared-reference", js: "(() => { const o = { x: 1 }; return [o, o]; })()", literal: "[&1 { x: 1 }, *1]" },
  { name: "cycle", js: '(() => { const o = { name: "loop" }; o.self = o; return o; })()', literal: '&1 { name: "loop", self: *1 }' },
  { name: "map-shared-key", js: "(() => { const k = [1]; return new Map([[k, k]]); })()", literal: "new Map([[&1 [1], *1]])" },
  {
    name: "everything",
    js: '{ name: "Ada", at: new Date(0), tags: new Set(["a"]), n: 1n, scores: new Map([["x", [1.5, -0]]]), re: /x+/g, bytes: new Uint16Array([7]) }',
    literal: '{ name: "Ada", at: new Date("1970-01-01T00:00:00.000Z"), tags: new Set(["a"]), n: 1n, scores: new Map([["x", [1.5, -0]]]), re: /x+/g, bytes: new Uint16Array([7]) }',
  },
];

/// The value of a sample, evaluated.
export function evaluate(sample) {
  return (0, eval)(`(${sample.js})`);
}

/// The literal of a sample: its `literal`, or the one its function makes of the value.
export function literalOf(sample, key = "literal") {
  const l = sample[key] ?? sample.literal;
  return typeof l === "function" ? l(evaluate(sample)) : l;
}
