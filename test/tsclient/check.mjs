// Calls every tool of `commandcore mcp` through the official TypeScript
// SDK client, which validates each structured result (failures included)
// against the tool's outputSchema and throws when one does not match.
// Usage: node check.mjs BIN
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const bin = process.argv[2];
const work = mkdtempSync(join(tmpdir(), "commandcore-tsclient-"));
const transport = new StdioClientTransport({
  command: bin,
  args: ["mcp", "--state-dir", join(work, "state")],
  env: process.env,
  stderr: "inherit",
});
const client = new Client({ name: "tsclient-check", version: "1" });
await client.connect(transport);

const { tools } = await client.listTools();
const size = Buffer.byteLength(JSON.stringify({ tools }));
console.log(`tools/list: ${tools.length} tools, ${size} bytes`);

const called = new Set();
async function call(name, args, wantError = false) {
  const res = await client.callTool({ name, arguments: args });
  called.add(name);
  if (!!res.isError !== wantError) {
    throw new Error(`${name}: isError ${res.isError}: ${JSON.stringify(res.structuredContent)}`);
  }
  return res.structuredContent;
}

await call("system.metrics", {});
await call("process.list", { limit: 5 });
const done = await call("process.start", { command: "echo ts-marker", wait_ms: 5000 });
await call("process.status", { process_id: done.process_id });
await call("process.output", { process_id: done.process_id });
await call("process.wait", { process_ids: [done.process_id], timeout_ms: 5000 });
await call("process.jobs", {});
await call("process.forget", { process_id: done.process_id });
const tty = await call("process.start", { command: "cat", pty: { cols: 80, rows: 24 } });
await call("process.input", { process_id: tty.process_id, data: "hello\n", wait_ms: 2000, until: "hello" });
await call("process.resize", { process_id: tty.process_id, cols: 100, rows: 30 });
await call("process.screen", { process_id: tty.process_id });
await call("process.stop", { process_id: tty.process_id });
await call("process.run", { command: "echo run-marker" });
const file = join(work, "f.txt");
await call("files.write", { path: file, content: "one\ntwo\n" });
await call("files.read", { path: file });
await call("files.edit", { path: file, edits: [{ old_text: "two", new_text: "three" }] });
await call("files.list", { path: work });
await call("files.search", { root: work, text: "three" });
// Failures carry structuredContent.error, validated too.
await call("process.status", { process_id: "00000000-0000-4000-8000-000000000000" }, true);
await call("process.start", { command: "true", wait_ms: -1 }, true);

const missed = tools.map((t) => t.name).filter((n) => !called.has(n));
await client.close();
if (missed.length) {
  console.error(`not called: ${missed.join(", ")}`);
  process.exit(1);
}
console.log(`ok: ${called.size} tools called, every result valid against its outputSchema`);
