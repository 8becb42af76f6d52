// The official TypeScript SDK's OAuth client against a device's MCP URL of
// the relay, driven by internal/e2e's TestTypeScriptSDKOAuthClient, which
// plays the person: this script prints "AUTHORIZE <url>" when the SDK
// sends the person to the authorization URL and reads "CODE <code>" once
// the person allowed it in the panel; then it connects again with the
// tokens and prints "JOBS <n>" and "START <refused|allowed>".
// Usage: node oauth.mjs ENDPOINT CALLBACK
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { UnauthorizedError } from "@modelcontextprotocol/sdk/client/auth.js";
import { createInterface } from "node:readline";

const [endpoint, callback] = process.argv.slice(2);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

const kept = {};
const provider = {
  get redirectUrl() { return callback; },
  get clientMetadata() {
    return {
      client_name: "TypeScript SDK client",
      redirect_uris: [callback],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  },
  clientInformation() { return kept.client; },
  saveClientInformation(info) { kept.client = info; },
  tokens() { return kept.tokens; },
  saveTokens(tokens) { kept.tokens = tokens; },
  redirectToAuthorization(url) { console.log(`AUTHORIZE ${url.href}`); },
  saveCodeVerifier(v) { kept.verifier = v; },
  codeVerifier() { return kept.verifier; },
};

const connect = async () => {
  const transport = new StreamableHTTPClientTransport(new URL(endpoint), { authProvider: provider });
  const client = new Client({ name: "tsclient-oauth", version: "1" });
  await client.connect(transport);
  return { client, transport };
};

let first;
try {
  await connect();
  throw new Error("connected without signing in");
} catch (err) {
  if (!(err instanceof UnauthorizedError)) throw err;
}
const answer = (await lines.next()).value ?? "";
if (!answer.startsWith("CODE ")) throw new Error(`expected a code, got ${JSON.stringify(answer)}`);
first = new StreamableHTTPClientTransport(new URL(endpoint), { authProvider: provider });
await first.finishAuth(answer.slice(5));

const { client } = await connect();
const jobs = await client.callTool({ name: "process.jobs", arguments: {} });
if (jobs.isError) throw new Error(`process.jobs: ${JSON.stringify(jobs.structuredContent)}`);
console.log(`JOBS ${jobs.structuredContent.jobs.length}`);
let started;
try {
  started = await client.callTool({ name: "process.start", arguments: { command: "true" } });
} catch (err) {
  started = { isError: true };
}
console.log(`START ${started.isError ? "refused" : "allowed"}`);
await client.close();
process.exit(0);
