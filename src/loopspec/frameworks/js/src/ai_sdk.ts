// The Vercel AI SDK (`ai`) behind loopspec's adapter protocol: its agent, ToolLoopAgent, in its default
// configuration, with the SDK's own test model (MockLanguageModelV4 from `ai/test`) scripted by model.next.
//
// * Each doGenerate first reads what the agent put in front of the model (the `tool` message after the last
//   assistant message: its tool-result parts, paired with the round's requests by call id and tool name), then
//   asks model.next: calls become tool-call parts (`input` is the arguments' JSON text; a call without
//   arguments has the empty text, what a provider passes for empty arguments), a final answer a text part.
// * Tools are `tool({inputSchema: <zod schema a user writes>, execute})`; execute counts the execution and
//   calls the harness's tool (tool.execute) with the trusted principal of the run.
// * maxRounds -> stopWhen: isStepCount(maxRounds) (else the agent's default, 20 steps). The answers of the
//   last step, which no model request showed, are read from the result's responseMessages: the caller of
//   generate receives them (documented: 'the accumulated response messages from the call ... that you can add
//   to your conversation history'), so they are answered, as the spec's last round is (docs/frameworks.md).
// * The SDK has no abort mode (a tool's exception becomes a tool-error part the model sees): the Python side
//   runs every step in continue mode.
import { ToolLoopAgent, isStepCount, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { Json, Rpc, serve } from "./protocol.js";
import { ModelFailure, ModelNext, Run, batchAsLoop, loopRun, ok, settingsFrom, shown, versionOf, zodSchema }
  from "./run.js";

const settings = settingsFrom(process.argv.slice(2), { toolCallConcurrency: "default" });

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
                outputTokens: { total: 1, text: 1, reasoning: 0 } };

class Invalid extends Error {}

/** The answers in a tool message's parts: output json/text -> ok, error-text/error-json -> the code's error with
 * the text the model is shown. */
function readToolMessage(run: Run, parts: Json[], round = run.current): void {
  const results = parts.filter((p) => p?.type === "tool-result");
  for (const [i, p] of run.pairById(results, (r) => r.toolCallId, (r) => r.toolName, round)) {
    const cid = run.call(i)?.id;
    const out = p.output ?? {};
    if (out.type === "error-text" || out.type === "error-json" || out.type === "execution-denied") {
      run.answer(i, shown(cid, run.errorCode(i), out.value ?? out.reason ?? null));
    } else {
      run.answer(i, ok(cid, out.value ?? null));
    }
  }
}

/** The parts of the tool message that follows the last assistant message (none: null). */
function lastToolParts(messages: Json[]): Json[] | null {
  let last = -1;
  messages.forEach((m, k) => { if (m?.role === "assistant") last = k; });
  if (last < 0) return null;
  return messages.slice(last + 1).filter((m) => m?.role === "tool").flatMap((m) => m.content ?? []);
}

async function loop(run: Run, params: Json, modelNext: ModelNext, _batch: boolean): Promise<Json> {
  const limits = params.limits ?? {};
  const model = new MockLanguageModelV4({
    doGenerate: async (opts: Json) => {
      if (run.current >= 0) {
        const parts = lastToolParts(opts.prompt ?? []);
        if (parts) readToolMessage(run, parts);
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
    tools[name] = tool({
      description: `The tool ${name}.`,
      inputSchema: zodSchema(schema),
      execute: async (input: Json, options: Json) => {
        const i = run.entering(options.toolCallId, name, input);
        return run.enter(i, options.toolCallId, name, input, options?.abortSignal);
      },
    });
  }
  const agent = new ToolLoopAgent({
    model, tools,
    ...(limits.maxRounds ? { stopWhen: isStepCount(limits.maxRounds) } : {}),
    ...(settings.toolCallConcurrency !== "default" ? { toolCallConcurrency: Number(settings.toolCallConcurrency) } : {}),
  } as Json);
  let result: Json;
  try {
    result = await agent.generate({ prompt: "go" });
  } catch (e: any) {
    if (e instanceof ModelFailure || e instanceof Invalid || e?.cause instanceof ModelFailure || e?.cause instanceof Invalid
        || String(e?.name).includes("RetryError")) {
      return run.outcome("FAILED", "MODEL_ERROR");
    }
    throw e;
  }
  const parts = lastToolParts(result.responseMessages ?? result.response?.messages ?? []);
  if (parts && run.current >= 0) readToolMessage(run, parts);
  if (run.final !== null) return run.outcome("COMPLETED", "FINAL_ANSWER");
  return run.outcome("TRUNCATED", "MAX_ROUNDS");
}

const version = await versionOf("ai");
serve({
  name: "ai-sdk", version: `ai ${version}`, concurrency: settings.toolCallConcurrency === "default",
  batchRun: (params: Json, rpc: Rpc) => batchAsLoop(params, rpc, loop),
  loopRun: (params: Json, rpc: Rpc) => loopRun(params, rpc, loop),
});
