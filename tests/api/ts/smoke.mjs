// Smoke test of the Criogen REST API with the official TypeScript client
// (@langchain/langgraph-sdk). Usage: node smoke.mjs URL API_KEY; prints JSON, exits 1 on
// the first failed check.
import assert from "node:assert/strict";
import { Client } from "@langchain/langgraph-sdk";

const [apiUrl, apiKey] = process.argv.slice(2);
const client = new Client({ apiUrl, apiKey });
const done = { steps: ["a", "b", "c"], n: 3 };

const thread = await client.threads.create({ metadata: { from: "typescript" } });
const tid = thread.thread_id;
assert.deepEqual(await client.runs.wait(tid, "steps", { input: { n: 0 } }), done);

const state = await client.threads.getState(tid);
assert.deepEqual(state.values, done);
assert.deepEqual(state.next, []);
const history = await client.threads.getHistory(tid);
assert.deepEqual(history.map((s) => s.values.n), [3, 2, 1, 0]);

const streamed = [];
for await (const chunk of client.runs.stream(tid, "steps", { input: { n: 0 }, streamMode: "values" })) {
  streamed.push(chunk.event);
}
assert.equal(streamed[0], "metadata");
assert.ok(streamed.includes("values"));

const hitl = (await client.threads.create()).thread_id;
const waiting = await client.runs.wait(hitl, "hitl", { input: { n: 0 } });
assert.deepEqual(waiting.__interrupt__[0].value, { question: "approve?", n: 1 });
assert.equal((await client.threads.get(hitl)).status, "interrupted");
const final = await client.runs.wait(hitl, "hitl", { command: { resume: "yes" } });
assert.equal(final.answer, "yes");
assert.equal((await client.threads.get(hitl)).status, "idle");

const found = await client.threads.search({ metadata: { from: "typescript" }, limit: 5 });
assert.ok(found.some((t) => t.thread_id === tid));
console.log(JSON.stringify({ ok: true, thread_id: tid, events: streamed.length }));
