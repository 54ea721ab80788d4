// loopspec's adapter protocol (spec/PROTOCOL.md) over stdio, for an implementation written in TypeScript:
// newline-delimited JSON-RPC 2.0, requests both ways, v1 sequential (one tool.execute or model.next outstanding
// at a time: the adapters' calls queue here). Nothing but protocol messages goes to stdout: console output of
// the frameworks is sent to stderr.
//
// Protocol v1.1 (PROTOCOL.md section 7, the `concurrency` capability): in a batch.run whose params carry
// `concurrency`, Rpc.hold() makes every tool.execute go out at once, when the framework starts the execution
// (C2), and its answer is whatever the harness releases (C3): the tool body awaits it. A watcher says
// `tool.waiting` when the framework is idle while answers are held: nothing was sent or answered during QUIET
// consecutive turns of Node's event loop (setImmediate: every promise job queued before has run), i.e. every
// running body awaits a held answer; after each `tool.waiting` it waits for the release before counting again.
// A tool body whose abort signal fires while its answer is held sends `$/cancelRequest` (C5) and fails.
import * as readline from "node:readline";
import { writeSync } from "node:fs";

export type Json = any;

export class RpcError extends Error {
  constructor(public code: number, message: string, public data?: Json) {
    super(message);
  }
}

export interface Adapter {
  name: string;
  version: string;
  /** protocol v1.1: the framework runs the calls of a response concurrently at these settings */
  concurrency?: boolean;
  batchRun(params: Json, rpc: Rpc): Promise<Json>;
  loopRun(params: Json, rpc: Rpc): Promise<Json>;
}

for (const k of ["log", "info", "debug", "warn", "trace", "dir"] as const) {
  (console as any)[k] = (...args: any[]) => process.stderr.write(args.map(String).join(" ") + "\n");
}

function send(msg: Json): void {
  const text = JSON.stringify(msg) + "\n";
  const buf = Buffer.from(text, "utf8");
  let off = 0;
  while (off < buf.length) {
    try {
      off += writeSync(1, buf, off);
    } catch (e: any) {
      if (e.code !== "EAGAIN") throw e;
    }
  }
}

export class Rpc {
  private next = 0;
  private pending = new Map<number, { resolve: (v: Json) => void; reject: (e: any) => void }>();
  private queue: Promise<unknown> = Promise.resolve();

  /** Held answers (a concurrent batch step): request ids of tool.execute sent and not answered yet. */
  private held = new Set<number>();
  private holding = false;
  private activity = 0;
  private watching = false;
  private released: (() => void) | null = null;
  static readonly QUIET = 32;

  /** Protocol v1.1 for the current run: tool.execute requests go out at once and their answers are held. */
  hold(on: boolean): void {
    this.holding = on;
    if (!on) { // the run has ended: executions still held were left running by the framework (C6)
      for (const id of this.held) this.pending.delete(id);
      this.held.clear();
      const r = this.released;
      this.released = null;
      r?.();
    }
  }

  private settle(id: number): void {
    if (this.held.delete(id)) {
      this.activity++;
      const r = this.released;
      this.released = null;
      r?.();
    }
  }

  private async watch(): Promise<void> {
    if (this.watching) return;
    this.watching = true;
    try {
      let quiet = 0;
      let seen = this.activity;
      while (this.holding && this.held.size > 0) {
        await new Promise((r) => setImmediate(r));
        if (this.activity !== seen) {
          seen = this.activity;
          quiet = 0;
          continue;
        }
        if (++quiet < Rpc.QUIET) continue;
        quiet = 0;
        const released = new Promise<void>((r) => { this.released = r; });
        send({ jsonrpc: "2.0", method: "tool.waiting", params: {} });
        await released; // the harness answers one held request (or the run stops holding)
        seen = this.activity;
      }
    } finally {
      this.watching = false;
    }
  }

  private requestHeld(method: string, params: Json, signal?: AbortSignal): Promise<Json> {
    return new Promise<Json>((resolve, reject) => {
      const id = ++this.next;
      let onAbort: (() => void) | null = null;
      const done = () => { if (onAbort) signal?.removeEventListener("abort", onAbort); this.settle(id); };
      this.pending.set(id, { resolve: (v) => { done(); resolve(v); }, reject: (e) => { done(); reject(e); } });
      this.held.add(id);
      this.activity++;
      send({ jsonrpc: "2.0", id, method, params });
      if (signal) {
        onAbort = () => {
          if (!this.held.has(id)) return;
          this.pending.delete(id); // the harness's -32800 answer is discarded (C5)
          send({ jsonrpc: "2.0", method: "$/cancelRequest", params: { id } });
          this.settle(id);
          reject(new RpcError(-32800, "request cancelled"));
        };
        if (signal.aborted) onAbort();
        else signal.addEventListener("abort", onAbort, { once: true });
      }
      void this.watch();
    });
  }

  /** Send a request to the harness and wait for its answer; calls are serialized (protocol v1), except
   * tool.execute while answers are held (hold()). */
  request(method: string, params: Json, signal?: AbortSignal): Promise<Json> {
    if (this.holding && method === "tool.execute") return this.requestHeld(method, params, signal);
    const go = () =>
      new Promise<Json>((resolve, reject) => {
        const id = ++this.next;
        this.pending.set(id, { resolve, reject });
        send({ jsonrpc: "2.0", id, method, params });
      });
    const p = this.queue.then(go, go);
    this.queue = p.catch(() => undefined);
    return p;
  }

  /** Resolves once no request is queued or waiting (a framework's tool bodies may still be running when its run
   * has ended: their executions belong to the run, and nothing may be sent after its answer). */
  async idle(): Promise<void> {
    for (;;) {
      const q = this.queue;
      await q;
      await new Promise((r) => setImmediate(r));
      if (q === this.queue && this.pending.size === 0) return;
    }
  }

  response(msg: Json): void {
    const waiter = typeof msg.id === "number" ? this.pending.get(msg.id) : undefined;
    if (!waiter) return; // nobody waits for it
    this.pending.delete(msg.id);
    if (msg.error) waiter.reject(new RpcError(msg.error.code, String(msg.error.message), msg.error.data));
    else waiter.resolve(msg.result);
  }
}

export function serve(adapter: Adapter): void {
  const rpc = new Rpc();
  let busy = false;
  const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
  const reply = (id: Json, result: Json) => send({ jsonrpc: "2.0", id, result });
  const fail = (id: Json, code: number, message: string, data?: Json) =>
    send({ jsonrpc: "2.0", id, error: data === undefined ? { code, message } : { code, message, data } });

  async function run(id: Json, method: string, params: Json): Promise<void> {
    busy = true;
    try {
      const out = method === "batch.run" ? await adapter.batchRun(params, rpc) : await adapter.loopRun(params, rpc);
      reply(id, out);
    } catch (e: any) {
      if (e instanceof RpcError) fail(id, e.code, e.message, e.data);
      else {
        process.stderr.write(`internal error: ${e?.stack ?? e}\n`);
        fail(id, -32603, `internal error: ${e?.name ?? typeof e}`);
      }
    } finally {
      busy = false;
    }
  }

  rl.on("line", (line) => {
    if (!line.trim()) return;
    let msg: Json;
    try {
      msg = JSON.parse(line);
    } catch (e: any) {
      fail(null, -32700, "parse error", String(e?.message ?? e));
      return;
    }
    if (Array.isArray(msg) || msg === null || typeof msg !== "object") {
      fail(null, -32600, "invalid request");
      return;
    }
    const echo = typeof msg.id === "string" || typeof msg.id === "number" ? msg.id : null;
    if (msg.jsonrpc !== "2.0") {
      fail(echo, -32600, "invalid request");
      return;
    }
    if (!("method" in msg)) {
      rpc.response(msg);
      return;
    }
    if (typeof msg.method !== "string") {
      fail(echo, -32600, "invalid request");
      return;
    }
    if (!("id" in msg)) {
      if (msg.method === "exit") process.exit(0);
      return; // a notification
    }
    const { id, method, params } = msg;
    if (busy) {
      fail(echo, -32600, "a run is in progress (protocol v1 is sequential)");
      return;
    }
    if (method === "initialize") {
      if (!params || typeof params !== "object" || params.protocolVersion !== 1) {
        fail(id, -32602, "protocolVersion must be 1");
        return;
      }
      reply(id, { name: adapter.name, version: adapter.version,
                  capabilities: { batch: true, loop: true, concurrency: adapter.concurrency ?? false } });
    } else if (method === "shutdown") {
      reply(id, null);
      process.exit(0);
    } else if (method === "batch.run" || method === "loop.run") {
      if (!params || typeof params !== "object" || Array.isArray(params)) {
        fail(id, -32602, "params must be an object");
        return;
      }
      void run(id, method, params);
    } else {
      fail(id, -32601, `no method ${method}`);
    }
  });
  rl.on("close", () => process.exit(0));
}
