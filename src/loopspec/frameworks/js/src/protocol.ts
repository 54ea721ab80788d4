// loopspec's adapter protocol (spec/PROTOCOL.md) over stdio, for an implementation written in TypeScript:
// newline-delimited JSON-RPC 2.0, requests both ways, v1 sequential (one tool.execute or model.next outstanding
// at a time: the adapters' calls queue here). Nothing but protocol messages goes to stdout: console output of
// the frameworks is sent to stderr.
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

  /** Send a request to the harness and wait for its answer; calls are serialized (protocol v1). */
  request(method: string, params: Json): Promise<Json> {
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
                  capabilities: { batch: true, loop: true, concurrency: false } });
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
