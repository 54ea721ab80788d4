// Real OpenTelemetry recordings of the AI SDK for loopspec's oracle (tests/golden/oracle/rec-ai-sdk-*): the AI
// SDK's ToolLoopAgent with a scripted MockLanguageModelV4 (no network), traced by the AI SDK's own OpenTelemetry
// integration (@ai-sdk/otel, registered with registerTelemetry) into the OpenTelemetry SDK, and exported as
// OTLP/JSON by the OpenTelemetry JS serializer (@opentelemetry/otlp-transformer's JsonTraceSerializer, what the
// OTLP/HTTP JSON exporter sends), one ExportTraceServiceRequest a line. Trace and span ids come from a counting id
// generator, so a recording's ids are the same every time.
//
//   node dist/ai_sdk_telemetry.js OUT_DIR     writes OUT_DIR/rec-ai-sdk-<scenario>.otlp.jsonl for each scenario
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { OpenTelemetry } from "@ai-sdk/otel";
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { JsonTraceSerializer } from "@opentelemetry/otlp-transformer";
import { ToolLoopAgent, registerTelemetry, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

type Json = any;

let counter = 0;
const hex = (n: number, width: number) => n.toString(16).padStart(width, "0");
const idGenerator = {
  generateTraceId: () => hex(++counter, 32),
  generateSpanId: () => hex(++counter, 16),
};

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ idGenerator, spanProcessors: [new SimpleSpanProcessor(exporter)] } as Json);
registerTelemetry(new OpenTelemetry({ tracer: provider.getTracer("loopspec-recorder") } as Json));

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
                outputTokens: { total: 1, text: 1, reasoning: 0 } };
const call = (id: string, q: string) => ({ type: "tool-call", toolCallId: id, toolName: "lookup", input: JSON.stringify({ q }) });

/** name -> the scripted model's responses (tool calls, then a final text). */
const SCENARIOS: Record<string, Json[][]> = {
  // two calls with distinct ids, both executed and answered, then the final answer
  pass: [[call("call_1", "a"), call("call_2", "b")], [{ type: "text", text: "done" }]],
  // the model repeats call id call_1 with the same input in the next step: the SDK executes it again (R6)
  "fail-replay-reexecuted": [[call("call_1", "a")], [call("call_1", "a")], [{ type: "text", text: "done" }]],
  // the model reuses call id call_1 with other input in the next step: the SDK executes it (R7)
  "fail-conflict-executed": [[call("call_1", "a")], [call("call_1", "b")], [{ type: "text", text: "done" }]],
};

const out = process.argv[2] ?? ".";
for (const [name, script] of Object.entries(SCENARIOS)) {
  exporter.reset();
  let n = 0;
  const model = new MockLanguageModelV4({
    doGenerate: async () => {
      const content = script[n++];
      return { content, finishReason: { unified: content[0].type === "text" ? "stop" : "tool-calls", raw: undefined },
               usage, warnings: [] } as Json;
    },
  });
  let executions = 0;
  const agent = new ToolLoopAgent({
    model, tools: {
      lookup: tool({ description: "Look something up.", inputSchema: z.object({ q: z.string() }),
                     execute: async ({ q }: Json) => ({ result: q, execution: ++executions }) }),
    },
  } as Json);
  await agent.generate({ prompt: "go" });
  await provider.forceFlush();
  const body = new TextDecoder().decode(JsonTraceSerializer.serializeRequest(exporter.getFinishedSpans()) as Uint8Array);
  writeFileSync(join(out, `rec-ai-sdk-${name}.otlp.jsonl`), body + "\n");
}
await provider.shutdown();
