// Mastra (`@mastra/core`) behind loopspec's adapter protocol: an Agent with createTool tools (zod input schemas)
// and the AI SDK's test model (MockLanguageModelV4 from `ai/test`) scripted by model.next;
// `agent.generate(prompt, {maxSteps})`.
//
// * Each doGenerate first reads the `tool` message after the last assistant message of the prompt (tool-result
//   parts paired with the round's requests by call id and tool name; a request whose tool body did not return is
//   an error answer with the text the model sees, whatever the part's type: Mastra answers arguments that fail
//   the schema with a json output {error: true, message}), then asks model.next (as the AI SDK adapter).
// * maxRounds -> maxSteps (else Mastra's default, stepCountIs(5)). The answers of the last step are read from the
//   result's response messages.
// * Mastra has no abort mode (a tool's exception becomes an error-text result the model sees): the Python side
//   runs every step in continue mode.
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { MockLanguageModelV4 } from "ai/test";
import { Json, Rpc, serve } from "./protocol.js";
import { ModelFailure, ModelNext, Run, batchAsLoop, loopRun, ok, settingsFrom, shown, versionOf, zodSchema }
  from "./run.js";

const settings = settingsFrom(process.argv.slice(2), { steps: "max-rounds" });

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
                outputTokens: { total: 1, text: 1, reasoning: 0 } };

class Invalid extends Error {}

function lastToolParts(messages: Json[]): Json[] | null {
  let last = -1;
  messages.forEach((m, k) => { if (m?.role === "assistant") last = k; });
  if (last < 0) return null;
  return messages.slice(last + 1).filter((m) => m?.role === "tool").flatMap((m) => (Array.isArray(m.content) ? m.content : []));
}

async function loop(run: Run, params: Json, modelNext: ModelNext, _batch: boolean): Promise<Json> {
  const limits = params.limits ?? {};
  const returned = new Set<number>();

  function read(parts: Json[]): void {
    const results = parts.filter((p) => p?.type === "tool-result");
    for (const [i, p] of run.pairById(results, (r) => r.toolCallId, (r) => r.toolName)) {
      const cid = run.call(i)?.id;
      const out = p.output ?? {};
      const value = out.value ?? out.reason ?? null;
      if (returned.has(i) && (out.type === "json" || out.type === "text")) run.answer(i, ok(cid, value));
      else run.answer(i, shown(cid, run.errorCode(i), value));
    }
  }

  const model = new MockLanguageModelV4({
    doGenerate: async (opts: Json) => {
      if (run.current >= 0) {
        const parts = lastToolParts(opts.prompt ?? []);
        if (parts) read(parts);
      }
      const [reply, kind] = await run.nextReply(modelNext);
      if (kind === "final") {
        run.final = reply.final;
        return { content: [{ type: "text", text: reply.final }], finishReason: { unified: "stop", raw: "stop" },
                 usage, warnings: [] };
      }
      if (kind !== "calls") throw new Invalid("the model answered with neither calls nor a final answer");
      run.propose(reply.calls);
      const content = reply.calls.map((c: Json) => ({
        type: "tool-call", toolCallId: c.id, toolName: c.name,
        input: "arguments" in c ? JSON.stringify(c.arguments) : "",
      }));
      if (!content.length) run.final = "";
      return { content, finishReason: content.length ? { unified: "tool-calls", raw: "tool_calls" }
                                                     : { unified: "stop", raw: "stop" }, usage, warnings: [] };
    },
  });
  const tools: Record<string, Json> = {};
  for (const [name, schema] of Object.entries(run.tools)) {
    tools[name] = createTool({
      id: name, description: `The tool ${name}.`, inputSchema: zodSchema(schema) as Json,
      execute: async (input: Json, context: Json) => {
        const callId = context?.agent?.toolCallId;
        const i = run.entering(callId, name, input);
        const out = await run.enter(i, callId, name, input, context?.abortSignal ?? context?.agent?.abortSignal);
        if (i !== null) returned.add(i);
        return out;
      },
    } as Json);
  }
  const agent = new Agent({ id: "loopspec", name: "loopspec", instructions: "", model: model as Json, tools });
  let result: Json;
  try {
    const steps = settings.steps === "max-rounds" && limits.maxRounds ? { maxSteps: limits.maxRounds } : {};
    result = await agent.generate("go", steps);
  } catch (e: any) {
    if (e instanceof ModelFailure || e instanceof Invalid || e?.cause instanceof ModelFailure || e?.cause instanceof Invalid) {
      return run.outcome("FAILED", "MODEL_ERROR");
    }
    throw e;
  }
  if (result?.error) {
    const err = result.error;
    if (err instanceof ModelFailure || err instanceof Invalid || err?.cause instanceof ModelFailure
        || err?.cause instanceof Invalid || /model/i.test(String(err?.message))) return run.outcome("FAILED", "MODEL_ERROR");
  }
  const parts = lastToolParts(result?.response?.messages ?? []);
  if (parts && run.current >= 0) read(parts);
  if (run.final !== null) return run.outcome("COMPLETED", "FINAL_ANSWER");
  return run.outcome("TRUNCATED", "MAX_ROUNDS");
}

const version = await versionOf("@mastra/core");
serve({
  name: "mastra", version: `@mastra/core ${version}`, concurrency: true,
  batchRun: (params: Json, rpc: Rpc) => batchAsLoop(params, rpc, loop),
  loopRun: (params: Json, rpc: Rpc) => loopRun(params, rpc, loop),
});
