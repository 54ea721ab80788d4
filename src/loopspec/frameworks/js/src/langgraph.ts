// LangGraph JS behind loopspec's adapter protocol: the prebuilt ReAct agent (`createReactAgent` from
// @langchain/langgraph/prebuilt, version v1 by default or v2) or LangChain's `createAgent` (the `agent` setting),
// with a scripted chat model (a BaseChatModel whose _generate asks model.next) and tools made with `tool()` from
// @langchain/core/tools with the zod schema a user writes.
//
// * Each _generate first reads the ToolMessages after the last AIMessage of the messages it is given, paired with
//   the round's requests by tool_call_id and name (status "error": the code of the request; else ok with the
//   content, parsed as JSON when it is). Calls become AIMessage.tool_calls; arguments that are not a JSON object
//   (missing ones included: no text to parse) cannot be a ToolCall (`args` is an object): they go where
//   LangChain's output parsers put them, invalid_tool_calls (the JSON text), and are no requests for LangGraph
//   (Run.dropped), as the profile's non_object_arguments = dropped says.
// * maxRounds -> recursionLimit = 2 x maxRounds (a round is the model node, then the tools node);
//   GraphRecursionError ends the run (MAX_ROUNDS). The tools node of the last round has run by then, but invoke
//   throws: its caller receives no state (the agents have no checkpointer by default), so the last round's
//   executions are never answered, and the adapter reports exactly that (it reads nothing after a throw).
// * Mode: continue keeps ToolNode's default (handleToolErrors: true: an exception becomes an error ToolMessage
//   with its message); abort passes the ReAct agent a ToolNode with handleToolErrors: false (a tool's exception
//   ends the run). createAgent has no such switch in its parameters: the Python side runs it in continue mode.
import { AIMessage } from "@langchain/core/messages";
import { BaseChatModel } from "@langchain/core/language_models/chat_models";
import { tool } from "@langchain/core/tools";
import { GraphRecursionError } from "@langchain/langgraph";
import { ToolNode, createReactAgent } from "@langchain/langgraph/prebuilt";
import { createAgent } from "langchain";
import { Json, Rpc, serve } from "./protocol.js";
import { ModelFailure, ModelNext, Run, ToolFailed, batchAsLoop, loopRun, ok, settingsFrom, shown, versionOf, zodSchema }
  from "./run.js";

const settings = settingsFrom(process.argv.slice(2), { agent: "react-v1" });

class Invalid extends Error {}

function msgType(m: Json): string {
  return typeof m?._getType === "function" ? m._getType() : typeof m?.getType === "function" ? m.getType() : m?.type;
}

function contentText(c: Json): Json {
  if (typeof c === "string") return c;
  if (Array.isArray(c)) return c.map((p) => (typeof p === "string" ? p : p?.text ?? "")).join("");
  return c;
}

/** The ToolMessages after the last AIMessage (null: no AIMessage yet). */
function lastToolMessages(messages: Json[]): Json[] | null {
  let last = -1;
  messages.forEach((m, k) => { if (msgType(m) === "ai") last = k; });
  if (last < 0) return null;
  return messages.slice(last + 1).filter((m) => msgType(m) === "tool");
}

function readToolMessages(run: Run, msgs: Json[]): void {
  for (const [i, m] of run.pairById(msgs, (t) => t.tool_call_id, (t) => t.name ?? run.call(run.roundPositions()[0])?.name)) {
    const cid = run.call(i)?.id;
    const text = contentText(m.content);
    if (m.status === "error") run.answer(i, shown(cid, run.errorCode(i), text));
    else {
      try { run.answer(i, ok(cid, JSON.parse(text))); } catch { run.answer(i, ok(cid, text)); }
    }
  }
}

async function loop(run: Run, params: Json, modelNext: ModelNext, _batch: boolean): Promise<Json> {
  const abort = (params.mode ?? "continue") === "abort";
  const limits = params.limits ?? {};

  class Scripted extends BaseChatModel {
    _llmType(): string { return "loopspec-scripted"; }
    bindTools(_tools: Json): Json { return this; }
    async _generate(messages: Json[]): Promise<Json> {
      if (run.current >= 0) {
        const got = lastToolMessages(messages);
        if (got) readToolMessages(run, got);
        for (const i of run.roundPositions()) if (run.dropped.has(i)) run.answers.delete(i);
      }
      const [reply, kind] = await run.nextReply(modelNext);
      if (kind === "final") {
        run.final = reply.final;
        const message = new AIMessage({ content: reply.final });
        return { generations: [{ text: reply.final, message }] };
      }
      if (kind !== "calls") throw new Invalid("the model answered with neither calls nor a final answer");
      run.propose(reply.calls);
      const toolCalls: Json[] = [];
      const invalid: Json[] = [];
      reply.calls.forEach((c: Json, j: number) => {
        // a call without arguments has no JSON text to parse: LangChain's parser (parseToolCall in
        // @langchain/core/dist/output_parsers/openai_tools/json_output_tools_parsers.js, `functionArgs =
        // JSON.parse(rawToolCall.function.arguments);`) throws on it, and the chat model makes it an invalid
        // tool call, as for any arguments that are not an object (the Python adapter does the same)
        const args = c.arguments;
        if (args && typeof args === "object" && !Array.isArray(args)) {
          toolCalls.push({ name: c.name, args, id: c.id, type: "tool_call" });
        } else {
          invalid.push({ name: c.name, args: "arguments" in c ? JSON.stringify(args) : undefined, id: c.id,
                         error: "arguments are not an object", type: "invalid_tool_call" });
          run.dropped.add(run.offsets[run.current] + j);
        }
      });
      if (!toolCalls.length) run.final = "";
      const message = new AIMessage({ content: "", tool_calls: toolCalls, invalid_tool_calls: invalid });
      return { generations: [{ text: "", message }] };
    }
  }

  const tools = Object.entries(run.tools).map(([name, schema]) => tool(async (input: Json, config: Json) => {
    const callId = config?.toolCall?.id ?? config?.toolCallId;
    const i = run.entering(callId, name, input);
    return JSON.stringify(await run.enter(i, callId, name, input, config?.signal));
  }, { name, description: `The tool ${name}.`, schema: zodSchema(schema) }));

  const variant = settings.agent;
  const agent: Json = variant === "create-agent"
    ? createAgent({ model: new Scripted({}) as Json, tools })
    : createReactAgent({ llm: new Scripted({}) as Json,
                         tools: abort ? new ToolNode(tools, { handleToolErrors: false }) : tools,
                         version: variant === "react-v2" ? "v2" : "v1" });
  const config: Json = { configurable: { principal: run.principal } };
  if (limits.maxRounds) config.recursionLimit = 2 * limits.maxRounds;
  const failedHere = () => [...run.failedAt.keys()].filter((i) => run.current >= 0 && i >= run.offsets[run.current])
    .sort((a, b) => a - b);
  try {
    const result = await agent.invoke({ messages: [{ role: "user", content: "go" }] }, config);
    const got = lastToolMessages(result?.messages ?? []);
    if (got && run.current >= 0) readToolMessages(run, got);
    if (run.final === null) {
      const last = (result?.messages ?? []).at(-1);
      run.final = msgType(last) === "ai" ? String(contentText(last.content)) : "";
    }
    return run.outcome("COMPLETED", "FINAL_ANSWER");
  } catch (e: any) {
    if (e instanceof GraphRecursionError || e?.name === "GraphRecursionError") {
      return run.outcome("TRUNCATED", "MAX_ROUNDS");
    }
    if (e instanceof ModelFailure || e instanceof Invalid || e?.cause instanceof ModelFailure || e?.cause instanceof Invalid) {
      return run.outcome("FAILED", "MODEL_ERROR");
    }
    const failed = failedHere();
    if (failed.length) return run.outcome("FAILED", "TERMINAL_ERROR", [failed[0], run.failedAt.get(failed[0])!]);
    if (e instanceof ToolFailed) return run.outcome("FAILED", "TERMINAL_ERROR");
    if (abort && run.current >= 0) {
      // handleToolErrors: false: an unknown tool or arguments that fail the schema raise in the tools node too;
      // the run ends at the first request of the message whose tool body did not run
      const at = run.roundPositions().find((i) => !run.dropped.has(i) && !run.entered.has(i) && !run.answers.has(i));
      if (at !== undefined) {
        const code = run.errorCode(at);
        return run.outcome("REJECTED", code, [at, code]);
      }
    }
    throw e;
  }
}

const version = await versionOf("@langchain/langgraph");
serve({
  name: "langgraph-js", version: `@langchain/langgraph ${version}`, concurrency: true,
  batchRun: (params: Json, rpc: Rpc) => batchAsLoop(params, rpc, loop),
  loopRun: (params: Json, rpc: Rpc) => loopRun(params, rpc, loop),
});
