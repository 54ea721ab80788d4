// OpenAI Agents JS (`@openai/agents`) behind loopspec's adapter protocol: `run(agent, input, {maxTurns})` with a
// scripted Model (getResponse asks model.next) and function tools.
//
// * Each getResponse first reads what the SDK put in front of the model: the function_call_result items added to
//   the input since the previous request, paired with the round's requests by call id and tool name. A call of
//   the round without a result was left out by the SDK (Run.dropped: not a request). Calls become function_call
//   items (`arguments` is the arguments' JSON text, the empty text when there are none), a final answer an
//   assistant message.
// * Tools are `tool({parameters: <the JSON schema>, strict: false, execute})` (a zod schema needs strict mode,
//   which makes every property required; the harness's schemas have optional ones). execute counts the
//   execution and calls the harness's tool. Continue mode keeps the SDK's default errorFunction (its fixed
//   text); abort mode passes errorFunction: null, so a tool's exception ends the run.
// * maxRounds -> maxTurns; MaxTurnsExceededError ends the run. The SDK checks maxTurns before a model request,
//   after the last turn's tools ran; the error the caller receives carries the run state, whose public
//   `history` holds the last turn's function_call_result items: those are read (answered, never shown).
// * Setting toolNotFoundBehavior: raise_error (the default) or return_error_to_model.
import { Agent, MaxTurnsExceededError, ModelBehaviorError, Usage, run as runAgent, setTracingDisabled, tool }
  from "@openai/agents";
import { Json, Rpc, serve } from "./protocol.js";
import { ModelFailure, ModelNext, Run, ToolFailed, batchAsLoop, loopRun, ok, settingsFrom, shown, versionOf }
  from "./run.js";

setTracingDisabled(true);
process.env.OPENAI_API_KEY ??= "sk-loopspec-dummy"; // never used: the model is scripted

const settings = settingsFrom(process.argv.slice(2), { toolNotFoundBehavior: "raise_error" });

class Invalid extends Error {}

function outputText(output: Json): Json {
  if (typeof output === "string") return output;
  if (output && typeof output === "object" && output.type === "text") return output.text;
  return output;
}

async function loop(run: Run, params: Json, modelNext: ModelNext, _batch: boolean): Promise<Json> {
  const abort = (params.mode ?? "continue") === "abort";
  const limits = params.limits ?? {};
  let seen = 0; // input items of the previous request: later ones are new
  const returned = new Set<number>(); // requests whose tool body returned (the others' results are errors)

  function readResults(items: Json[]): void {
    if (run.current < 0) return;
    const results = items.filter((it) => it?.type === "function_call_result");
    for (const [i, it] of run.pairById(results, (r) => r.callId, (r) => r.name)) {
      const cid = run.call(i)?.id;
      const text = outputText(it.output);
      if (!returned.has(i)) {
        // no body returned for it: the SDK's own answer (a failure's errorFunction text, an unknown tool with
        // return_error_to_model, arguments it cannot parse)
        run.answer(i, shown(cid, run.errorCode(i), text));
        continue;
      }
      try { run.answer(i, ok(cid, JSON.parse(text))); } catch { run.answer(i, ok(cid, text)); }
    }
  }

  function closeRound(): void {
    for (const i of run.roundPositions()) if (!run.answers.has(i)) run.dropped.add(i);
  }

  const model = {
    async getResponse(request: Json): Promise<Json> {
      const input: Json[] = Array.isArray(request.input) ? request.input : [];
      if (run.current >= 0) {
        readResults(input.slice(seen));
        closeRound();
      }
      seen = input.length;
      const [reply, kind] = await run.nextReply(modelNext);
      if (kind === "final") {
        run.final = reply.final;
        return { usage: new Usage(), output: [{ type: "message", role: "assistant", status: "completed",
                                                content: [{ type: "output_text", text: reply.final }] }] };
      }
      if (kind !== "calls") throw new Invalid("the model answered with neither calls nor a final answer");
      run.propose(reply.calls);
      return { usage: new Usage(), output: reply.calls.map((c: Json, j: number) => ({
        type: "function_call", id: `fc_${run.rounds}_${j}`, callId: c.id, name: c.name, status: "completed",
        arguments: "arguments" in c ? JSON.stringify(c.arguments) : "",
      })) };
    },
    async *getStreamedResponse(): AsyncIterable<Json> {
      throw new Error("the scripted model does not stream");
    },
  };

  const tools = Object.entries(run.tools).map(([name, schema]) => tool({
    name, description: `The tool ${name}.`, strict: false,
    parameters: { type: "object", properties: schema?.properties ?? {}, required: schema?.required ?? [],
                  additionalProperties: schema?.additionalProperties !== false } as Json,
    ...(abort ? { errorFunction: null } : {}),
    execute: async (input: Json, _ctx: Json, details: Json) => {
      const callId = details?.toolCall?.callId;
      const i = run.entering(callId, name, input);
      const out = JSON.stringify(await run.enter(i, callId, name, input, details?.signal));
      if (i !== null) returned.add(i);
      return out;
    },
  } as Json));

  const agent = new Agent({ name: "loopspec", model: model as Json, tools });

  /** The results of the turn the run ended in (never shown to the model), from the run state. */
  function readState(state: Json): void {
    let items: Json[] = [];
    try { items = state?.history ?? []; } catch { items = []; }
    let last = -1;
    items.forEach((it, k) => { if (it?.type === "function_call" && it?.id === `fc_${run.rounds}_0`) last = k; });
    if (last >= 0) readResults(items.slice(last));
  }

  const failedHere = () => [...run.failedAt.keys()].filter((i) => run.current >= 0 && i >= run.offsets[run.current]).sort((a, b) => a - b);
  try {
    const result: Json = await runAgent(agent, "go", {
      maxTurns: limits.maxRounds ?? 1_000_000,
      toolNotFoundBehavior: settings.toolNotFoundBehavior as Json,
    });
    const final = result.finalOutput;
    run.final = typeof final === "string" ? final : JSON.stringify(final ?? "");
    return run.outcome("COMPLETED", "FINAL_ANSWER");
  } catch (e: any) {
    if (e instanceof MaxTurnsExceededError) {
      readState(e.state);
      return run.outcome("TRUNCATED", "MAX_ROUNDS");
    }
    if (e instanceof ModelFailure || e instanceof Invalid || e?.cause instanceof ModelFailure) {
      return run.outcome("FAILED", "MODEL_ERROR");
    }
    readState(e?.state);
    const failed = failedHere();
    if (failed.length) return run.outcome("FAILED", "TERMINAL_ERROR", [failed[0], run.failedAt.get(failed[0])!]);
    if (e instanceof ToolFailed) return run.outcome("FAILED", "TERMINAL_ERROR");
    if (abort && run.current >= 0 && /argument|JSON|pars/i.test(String(e?.message))) {
      // abort mode (errorFunction: null): arguments the SDK cannot parse end the run, at the first request of the
      // response to a registered tool whose body did not run
      const at = run.roundPositions().find((i) => run.call(i)?.name in run.tools && !returned.has(i) && !run.entered.has(i));
      if (at !== undefined) return run.outcome("REJECTED", "INVALID_ARGUMENT", [at, "INVALID_ARGUMENT"]);
    }
    if (e instanceof ModelBehaviorError) return run.outcome("FAILED", "MODEL_ERROR");
    throw e;
  }
}

const version = await versionOf("@openai/agents");
serve({
  name: "openai-agents-js", version: `@openai/agents ${version}`, concurrency: true,
  batchRun: (params: Json, rpc: Rpc) => batchAsLoop(params, rpc, loop),
  loopRun: (params: Json, rpc: Rpc) => loopRun(params, rpc, loop),
});
