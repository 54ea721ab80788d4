// Real recordings of Mastra's own traces for loopspec's oracle (tests/golden/oracle/rec-mastra-*): a Mastra Agent
// with a createTool tool and the AI SDK's scripted MockLanguageModelV4 (no network), traced by Mastra's own
// observability (@mastra/observability, the `observability` of a Mastra instance) through its OpenTelemetry
// exporter (@mastra/otel-exporter's OtelExporter, given the OpenTelemetry SDK's InMemorySpanExporter as its
// `exporter`, so nothing is sent anywhere), and serialized as OTLP/JSON by @opentelemetry/otlp-transformer's
// JsonTraceSerializer (what the OTLP/HTTP JSON exporter sends), one ExportTraceServiceRequest a line.
//
// Mastra makes its span and trace ids from crypto.getRandomValues (@mastra/observability's generateSpanId /
// generateTraceId); here that fills each id with a counter, so a recording's ids (and so its report) are the same
// every time, as the AI SDK recorder's counting id generator does. Times are real.
//
//   node dist/mastra_telemetry.js OUT_DIR     writes OUT_DIR/rec-mastra-<scenario>.otlp.jsonl for each scenario
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Mastra } from "@mastra/core";
import { Agent } from "@mastra/core/agent";
import { createTool } from "@mastra/core/tools";
import { Observability } from "@mastra/observability";
import { OtelExporter } from "@mastra/otel-exporter";
import { InMemorySpanExporter } from "@opentelemetry/sdk-trace-base";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

type Json = any;

let counter = 0;
Object.defineProperty(globalThis.crypto, "getRandomValues", {
  configurable: true,
  value: <T extends ArrayBufferView | null>(bytes: T): T => {
    if (bytes instanceof Uint8Array) {
      bytes.fill(0);
      let n = ++counter;
      for (let k = bytes.length - 1; k >= 0 && n > 0; k--, n = Math.floor(n / 256)) bytes[k] = n % 256;
    }
    return bytes;
  },
});

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
                outputTokens: { total: 1, text: 1, reasoning: 0 } };
const call = (id: string, q: string) => ({ type: "tool-call", toolCallId: id, toolName: "lookup", input: JSON.stringify({ q }) });

/** name -> the scripted model's responses (tool calls, then a final text). */
const SCENARIOS: Record<string, Json[][]> = {
  // two calls with distinct ids, both executed, then the final answer
  pass: [[call("call_1", "a"), call("call_2", "b")], [{ type: "text", text: "done" }]],
  // the tool throws for q = "fail": Mastra makes the error a result the model sees, and the model answers
  "tool-error": [[call("call_1", "fail")], [{ type: "text", text: "sorry" }]],
  // the model repeats call id call_1 with the same input in the next step: Mastra executes it again (R6)
  "fail-replay-reexecuted": [[call("call_1", "a")], [call("call_1", "a")], [{ type: "text", text: "done" }]],
  // the model reuses call id call_1 with other input in the next step: Mastra executes it (R7)
  "fail-conflict-executed": [[call("call_1", "a")], [call("call_1", "b")], [{ type: "text", text: "done" }]],
};

/** The SDK's in-memory exporter, whose spans outlive the exporter's shutdown (the OtelExporter shuts it down). */
class Kept extends InMemorySpanExporter {
  override shutdown(): Promise<void> { return Promise.resolve(); }
}

const out = process.argv[2] ?? ".";
for (const [name, script] of Object.entries(SCENARIOS)) {
  const memory = new Kept();
  // the provider's endpoint is never used: `exporter` replaces the OTLP exporter it would build
  const otel = new OtelExporter({ exporter: memory as Json, signals: { logs: false }, logLevel: "error",
                                  provider: { custom: { endpoint: "http://127.0.0.1:9/v1/traces", protocol: "http/json" } },
                                } as Json);
  let n = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async () => {
      const content = script[n++];
      return { content, finishReason: { unified: content[0].type === "text" ? "stop" : "tool-calls", raw: undefined },
               usage, warnings: [] } as Json;
    },
  });
  let executions = 0;
  const lookup = createTool({
    id: "lookup", description: "Look something up.", inputSchema: z.object({ q: z.string() }),
    execute: async ({ q }: Json) => {
      executions += 1;
      if (q === "fail") throw new Error("the lookup service is down");
      return { result: q, execution: executions };
    },
  } as Json);
  const agent = new Agent({ id: "loopspec", name: "loopspec", instructions: "", model: model as Json, tools: { lookup } });
  const mastra = new Mastra({ agents: { loopspec: agent }, logger: false,
                              observability: new Observability({ configs: { otel: { serviceName: "loopspec-recorder",
                                                                                    exporters: [otel] } } }) } as Json);
  await mastra.getAgent("loopspec").generate("go");
  await (mastra as Json).observability?.flush?.();
  await (mastra as Json).observability?.shutdown?.();
  await otel.flush?.();
  await otel.shutdown?.();
  const spans = memory.getFinishedSpans();
  const body = new TextDecoder().decode(JsonTraceSerializer.serializeRequest(spans) as Uint8Array);
  writeFileSync(join(out, `rec-mastra-${name}.otlp.jsonl`), body + "\n");
}
