// What the TypeScript adapters share (the counterpart of loopspec/frameworks/_common.py): the bookkeeping of
// one run (request indices across rounds, answers read back from what the framework shows the model,
// executions counted in the tool bodies) and the loop.run / batch.run results built from it.
import { z } from "zod";
import { Json, Rpc, RpcError } from "./protocol.js";

export const CANARY_PREFIX = "loopspec-canary-";
const CATEGORIES = new Set(["DEPENDENCY_TEMPORARY", "NOT_FOUND_OR_NOT_ACCESSIBLE", "INTERNAL_ERROR"]);
const LIMIT_CODES = new Set(["BUDGET_EXHAUSTED", "TOOL_BUDGET_EXHAUSTED", "REQUEST_LIMIT", "DEADLINE_EXCEEDED"]);

/** Raised by a tool body when the harness's tool failed: its message carries a canary (R15). */
export class ToolFailed extends Error {
  constructor(public category: string, canary: string) {
    super(`tool failed (${category}): internal detail ${canary}`);
    this.name = "ToolFailed";
  }
}

/** The model (model.next) failed, or answered neither calls nor a final answer. */
export class ModelFailure extends Error {
  constructor(message = "the model failed") {
    super(message);
    this.name = "ModelFailure";
  }
}

export type Answer = { id: string | null; status: "ok" | "error"; output?: Json; code?: string; message?: Json };
export const ok = (id: Json, output: Json): Answer => ({ id: typeof id === "string" ? id : null, status: "ok", output });
export const shown = (id: Json, code: string, message: Json): Answer =>
  ({ id: typeof id === "string" ? id : null, status: "error", code, message });

export type ModelNext = (round: number, results: Answer[]) => Promise<Json>;

export function replyKind(reply: Json): "calls" | "final" | "invalid" {
  if (reply && typeof reply === "object" && !Array.isArray(reply)) {
    const keys = Object.keys(reply);
    if (keys.length === 1 && keys[0] === "calls" && Array.isArray(reply.calls)) return "calls";
    if (keys.length === 1 && keys[0] === "final" && typeof reply.final === "string") return "final";
  }
  return "invalid";
}

export class Run {
  rounds = 0;
  proposals: Json[][] = [];
  offsets: number[] = [];
  answers = new Map<number, Answer>();
  executed = 0;
  failedAt = new Map<number, string>();
  final: string | null = null;
  current = -1;
  entered = new Set<number>();
  dropped = new Set<number>();
  tools: Record<string, Json>;
  principal: string;

  constructor(public rpc: Rpc, params: Json) {
    this.tools = {};
    for (const t of params.tools ?? []) this.tools[t.name] = t.inputSchema ?? {};
    this.principal = typeof params.principal === "string" ? params.principal : "anonymous";
  }

  get requests(): number {
    return this.proposals.reduce((n, p) => n + p.length, 0);
  }

  propose(calls: Json[]): void {
    this.offsets.push(this.requests);
    this.proposals.push([...calls]);
    this.current = this.proposals.length - 1;
  }

  call(index: number): Json {
    for (let r = 0; r < this.offsets.length; r++) {
      const off = this.offsets[r];
      if (off <= index && index < off + this.proposals[r].length) return this.proposals[r][index - off];
    }
    return undefined;
  }

  roundPositions(round = this.current): number[] {
    if (round < 0) return [];
    const off = this.offsets[round];
    return Array.from({ length: this.proposals[round].length }, (_, k) => off + k);
  }

  /** The request of the current round whose tool body is entered: the first not entered yet with this id and
   * name, preferring one whose arguments are those received (ids may repeat). */
  entering(callId: Json, name: string, received: Json): number | null {
    const same = (a: Json) => JSON.stringify(a) === JSON.stringify(received);
    const holds = (a: Json) => a && typeof a === "object" && received && typeof received === "object"
      && Object.entries(received).every(([k, v]) => k in a && JSON.stringify(a[k]) === JSON.stringify(v));
    for (const sameId of [true, false]) {
      for (const match of [same, holds, (_: Json) => true]) {
        for (const i of this.roundPositions()) {
          const c = this.call(i);
          if (!this.entered.has(i) && c?.name === name && match(c.arguments) && (!sameId || c.id === callId)) {
            this.entered.add(i);
            return i;
          }
        }
      }
    }
    return null;
  }

  /** A tool body was entered: count the execution and run the harness's tool (tool.execute) with the
   * proposal's arguments and the trusted principal. */
  async enter(index: number | null, callId: Json, name: string, received: Json, signal?: AbortSignal): Promise<Json> {
    this.executed += 1;
    const k = this.executed;
    const call = index !== null ? this.call(index) : undefined;
    const args = call && call.arguments && typeof call.arguments === "object" && !Array.isArray(call.arguments)
      ? call.arguments : received;
    const cid = call ? call.id : callId;
    let res: Json;
    try {
      res = await this.rpc.request("tool.execute", { callId: cid, name, arguments: args ?? {},
                                                     context: { principal: this.principal } }, signal);
    } catch (e) {
      // cancelled by the framework (its abort signal, protocol C5): no failure of the tool, no answer
      if (e instanceof RpcError && e.code === -32800) throw e;
      const cat = e instanceof RpcError && e.data && CATEGORIES.has(e.data.category) ? e.data.category : "INTERNAL_ERROR";
      if (index !== null) this.failedAt.set(index, cat);
      throw new ToolFailed(cat, `${CANARY_PREFIX}${k}`);
    }
    if (!res || typeof res !== "object" || !("output" in res)) {
      if (index !== null) this.failedAt.set(index, "INTERNAL_ERROR");
      throw new ToolFailed("INTERNAL_ERROR", `${CANARY_PREFIX}${k}`);
    }
    return res.output;
  }

  answer(index: number, result: Answer): void {
    if (!this.answers.has(index)) this.answers.set(index, result);
  }

  roundResults(round: number): Answer[] {
    return this.roundPositions(round).filter((i) => this.answers.has(i)).map((i) => this.answers.get(i)!);
  }

  /** The model's next turn: the answers of the current round (what the model is shown), then model.next. */
  async nextReply(modelNext: ModelNext): Promise<[Json, string]> {
    const shownNow = this.current >= 0 ? this.roundResults(this.current) : [];
    this.rounds += 1;
    const reply = await modelNext(this.rounds, shownNow);
    return [reply, replyKind(reply)];
  }

  /** Pair the results the framework shows for the current round with its requests: each result with the first
   * request not paired yet that has its call id and tool name (ids may repeat; a framework may leave some out). */
  pairById<T>(items: T[], idOf: (t: T) => Json, nameOf: (t: T) => Json, round = this.current): [number, T][] {
    const free = this.roundPositions(round).filter((i) => !this.answers.has(i));
    const out: [number, T][] = [];
    for (const it of items) {
      const k = free.findIndex((i) => this.call(i)?.id === idOf(it) && this.call(i)?.name === nameOf(it));
      if (k < 0) continue;
      out.push([free[k], it]);
      free.splice(k, 1);
    }
    return out;
  }

  /** The error code of a request the framework answered with an error. */
  errorCode(i: number): string {
    const c = this.call(i);
    if (!(c?.name in this.tools)) return "UNKNOWN_TOOL";
    return this.failedAt.get(i) ?? "INVALID_ARGUMENT";
  }

  requestIndex(position: number): number {
    let d = 0;
    for (const x of this.dropped) if (x < position) d++;
    return position - d;
  }

  results(upto?: number): Answer[] {
    const end = upto ?? this.requests;
    const out: Answer[] = [];
    for (let r = 0; r < this.proposals.length; r++)
      for (const i of this.roundPositions(r)) if (i < end && this.answers.has(i)) out.push(this.answers.get(i)!);
    return out;
  }

  outcome(status: string, stopReason: string, aborted: [number, string] | null = null): Json {
    const results = this.results(aborted ? aborted[0] : undefined);
    const limitAnswer = results.some((r) => r.status === "error" && LIMIT_CODES.has(r.code ?? ""));
    return {
      status, stopReason,
      coverage: status === "COMPLETED" && !limitAnswer ? "COMPLETE" : "PARTIAL",
      executed: this.executed,
      aborted: aborted ? { index: this.requestIndex(aborted[0]), code: aborted[1] } : null,
      final: stopReason === "FINAL_ANSWER" ? this.final : null,
      results, rounds: this.rounds,
    };
  }
}

export function modelVia(rpc: Rpc): ModelNext {
  return async (round, results) => {
    try {
      return await rpc.request("model.next", { round, results });
    } catch (e) {
      if (e instanceof RpcError) throw new ModelFailure();
      throw e;
    }
  };
}

/** A batch is a loop whose model proposes the batch's calls once, then gives its final answer. */
export function batchModel(calls: Json[]): ModelNext {
  return async (round) => (round === 1 ? { calls } : { final: "end of batch" });
}

type Loop = (run: Run, params: Json, modelNext: ModelNext, batch: boolean) => Promise<Json>;

/** loop.run: the framework's run, then the executions its tool bodies still had queued (counted). */
export async function loopRun(params: Json, rpc: Rpc, loop: Loop): Promise<Json> {
  const run = new Run(rpc, params);
  const out = await loop(run, params, modelVia(rpc), false);
  await rpc.idle();
  return { ...out, executed: run.executed };
}

/** batch.run as a loop (the frameworks have no batch entry point of their own). */
export async function batchAsLoop(params: Json, rpc: Rpc, loop: Loop): Promise<Json> {
  const run = new Run(rpc, params);
  const mode = params.mode ?? "abort";
  const loopParams = { tools: params.tools ?? [], mode, onLimit: "throw", principal: params.principal ?? "anonymous",
                       limits: { maxExecutions: params.budget ?? null, maxRounds: null } };
  const concurrent = params.concurrency !== null && typeof params.concurrency === "object";
  rpc.hold(concurrent);
  let out: Json;
  try {
    out = await loop(run, loopParams, batchModel([...(params.calls ?? [])]), true);
  } finally {
    rpc.hold(false);
  }
  await rpc.idle();
  return { results: out.results, executed: run.executed, aborted: out.aborted };
}

/** The zod schema a TypeScript user writes for a tool with this (flat, R4) input schema: required properties
 * required, others optional; other properties kept unless additionalProperties is false. */
export function zodSchema(schema: Json): z.ZodObject<any> {
  const props: Record<string, Json> = schema?.properties ?? {};
  const required = new Set<string>(schema?.required ?? []);
  const shape: Record<string, z.ZodTypeAny> = {};
  for (const [name, p] of Object.entries(props)) {
    let t: z.ZodTypeAny = p.type === "string" ? z.string() : p.type === "integer" ? z.number().int()
      : p.type === "boolean" ? z.boolean() : z.any();
    if (!required.has(name)) t = t.optional();
    shape[name] = t;
  }
  return schema?.additionalProperties === false ? z.strictObject(shape) : z.looseObject(shape);
}

/** The settings given on the command line (``name=value,...``, as --impl 'NAME[...]' names them). */
export function settingsFrom(argv: string[], defaults: Record<string, string>): Record<string, string> {
  const out = { ...defaults };
  for (const part of (argv[0] ?? "").split(",").map((s) => s.trim()).filter(Boolean)) {
    const [k, v] = part.split("=");
    if (!(k in defaults)) {
      process.stderr.write(`unknown setting ${k}\n`);
      process.exit(2);
    }
    out[k] = v;
  }
  return out;
}

/** The installed version of a package (its package.json). */
export async function versionOf(pkg: string): Promise<string> {
  const { createRequire } = await import("node:module");
  const { readFileSync } = await import("node:fs");
  const req = createRequire(import.meta.url);
  let dir = req.resolve(pkg);
  const { dirname, join } = await import("node:path");
  for (let k = 0; k < 8; k++) {
    dir = dirname(dir);
    try {
      const j = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
      if (j.name === pkg) return j.version;
    } catch { /* not here */ }
  }
  return "?";
}
