/*
 * A tool-call executor in Java 17 that speaks the loopspec adapter protocol v1.2 (spec/PROTOCOL.md).
 *
 * One file, no dependencies (it carries a small JSON reader/writer). It implements the rules of
 * spec/SPEC.md for a batch (R1-R17) and for a loop (R18-R22): the per-call check order, id bindings
 * with canonical content, replay, conflict, budgets charged before the side effect, answers in
 * request order, abort and continue, safe errors and the trusted principal. Every tool runs on the
 * harness through a tool.execute request; in loop mode the model is asked with model.next.
 *
 *   javac -d build examples/java/LoopspecExecutor.java
 *   loopspec fuzz --impl "java -cp build LoopspecExecutor"
 *   loopspec fuzz --impl "java -cp build LoopspecExecutor --bug conflict-reuse"   # one deliberate bug
 *
 * With --concurrent (protocol v1.1, SPEC.md section 5) it announces the concurrency capability and
 * runs the overlapping calls of a batch on a thread pool (maxConcurrency threads): requests are
 * taken up in request order, checked and reserved in one step (R31); each execution runs in a pool
 * thread that asks the harness (tool.execute) and blocks for the answer; when the next request
 * cannot be taken up the main thread says tool.waiting, reads the answer the harness releases and
 * lands it; answers are committed in request order (R32), a repeated id waits for its execution
 * (R33), abort ends at the lowest request index (R34) and the executions after it are cancelled:
 * $/cancelRequest, and their pool threads interrupted (R35).
 *
 *   loopspec fuzz --impl "java -cp build LoopspecExecutor --concurrent"
 *
 * Protocol v1.2 (capability writes, PROTOCOL.md section 8): writes.run carries write tools through a
 * durable operation ledger in the step's stateDir, kept without libraries as an append-only journal of
 * JSON lines (ledger.jsonl), each change one line written and forced to the disk (FileChannel.force)
 * before anything else happens: the intent and the dispatch mark are durable before the tool.execute
 * that carries the idempotency key is sent (R37-R40); a lost answer is OUTCOME_UNKNOWN (R42) and is
 * reconciled by tool.lookup before anything is sent again (R43); a confirmed key is answered from the
 * ledger (R44); a new process on the same state directory replays the journal and resumes the run (R46).
 *
 *   loopspec fuzz --mode writes --impl "java -cp build LoopspecExecutor"
 *
 * Deliberate bugs (--bug NAME), for testing the fuzzer: replay-reexecutes (R6: a replay runs the tool
 * again), conflict-reuse (R7: a conflicting request gets the id's stored result), budget-after (R9:
 * the budget is checked after the tool ran); and those of the write tools, as in the Python example:
 * key-by-call-id (R37: the idempotency key is the call id), retry-without-lookup (R43: an unknown
 * outcome is sent again without a lookup), record-after-dispatch (R39: the dispatch mark is recorded
 * after the send), timeout-as-failure (R42: a lost answer is answered DEPENDENCY_TEMPORARY) and
 * failed-before-lookup (R43: recovery is not crash-safe: it records an unknown write failed before its
 * lookup answers, so a process killed at that lookup, PROTOCOL.md W3, leaves the write failed and the
 * next process sends it again).
 *
 * stdout carries only protocol messages; logs go to stderr.
 */

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.UncheckedIOException;
import java.io.Writer;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

public final class LoopspecExecutor {

    // ------------------------------------------------------------------------------------------
    // JSON: null is Json.NULL; numbers are BigDecimal; objects keep their key order.
    // ------------------------------------------------------------------------------------------

    static final class Json {
        static final Object NULL = new Object() {
            @Override public String toString() { return "null"; }
        };

        private final String s;
        private int i;

        private Json(String s) { this.s = s; }

        static Object parse(String text) {
            Json p = new Json(text);
            p.ws();
            Object v = p.value();
            p.ws();
            if (p.i != p.s.length()) throw new IllegalArgumentException("trailing characters");
            return v;
        }

        private void ws() {
            while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++;
        }

        private Object value() {
            if (i >= s.length()) throw new IllegalArgumentException("unexpected end");
            char c = s.charAt(i);
            switch (c) {
                case '{': return object();
                case '[': return array();
                case '"': return string();
                case 't': return literal("true", Boolean.TRUE);
                case 'f': return literal("false", Boolean.FALSE);
                case 'n': return literal("null", NULL);
                default: return number();
            }
        }

        private Object literal(String word, Object v) {
            if (!s.startsWith(word, i)) throw new IllegalArgumentException("bad literal");
            i += word.length();
            return v;
        }

        private Map<String, Object> object() {
            Map<String, Object> m = new LinkedHashMap<>();
            i++;
            ws();
            if (s.charAt(i) == '}') { i++; return m; }
            while (true) {
                ws();
                String k = string();
                ws();
                if (s.charAt(i++) != ':') throw new IllegalArgumentException("expected :");
                ws();
                m.put(k, value());
                ws();
                char c = s.charAt(i++);
                if (c == '}') return m;
                if (c != ',') throw new IllegalArgumentException("expected , or }");
            }
        }

        private List<Object> array() {
            List<Object> a = new ArrayList<>();
            i++;
            ws();
            if (s.charAt(i) == ']') { i++; return a; }
            while (true) {
                ws();
                a.add(value());
                ws();
                char c = s.charAt(i++);
                if (c == ']') return a;
                if (c != ',') throw new IllegalArgumentException("expected , or ]");
            }
        }

        private String string() {
            if (s.charAt(i) != '"') throw new IllegalArgumentException("expected a string");
            i++;
            StringBuilder b = new StringBuilder();
            while (true) {
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') { b.append(c); continue; }
                char e = s.charAt(i++);
                switch (e) {
                    case '"': b.append('"'); break;
                    case '\\': b.append('\\'); break;
                    case '/': b.append('/'); break;
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'n': b.append('\n'); break;
                    case 'r': b.append('\r'); break;
                    case 't': b.append('\t'); break;
                    case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                    default: throw new IllegalArgumentException("bad escape");
                }
            }
        }

        private BigDecimal number() {
            int start = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            return new BigDecimal(s.substring(start, i));
        }

        static String write(Object v) {
            StringBuilder b = new StringBuilder();
            write(v, b, false);
            return b.toString();
        }

        /** Canonical text: keys sorted, numbers by value (1 == 1.0), booleans distinct from numbers. */
        static String canonical(Object v) {
            StringBuilder b = new StringBuilder();
            write(v, b, true);
            return b.toString();
        }

        @SuppressWarnings("unchecked")
        private static void write(Object v, StringBuilder b, boolean canonical) {
            if (v == null || v == NULL) {
                b.append("null");
            } else if (v instanceof Boolean) {
                b.append(v.toString());
            } else if (v instanceof BigDecimal d) {
                b.append(canonical ? canonicalNumber(d) : d.toString());
            } else if (v instanceof Number n) {
                b.append(n.toString());
            } else if (v instanceof String str) {
                quote(str, b);
            } else if (v instanceof List<?> list) {
                b.append('[');
                for (int k = 0; k < list.size(); k++) {
                    if (k > 0) b.append(',');
                    write(list.get(k), b, canonical);
                }
                b.append(']');
            } else if (v instanceof Map<?, ?> map) {
                Map<String, Object> m = (Map<String, Object>) map;
                if (canonical) m = new TreeMap<>(m);
                b.append('{');
                boolean first = true;
                for (Map.Entry<String, Object> e : m.entrySet()) {
                    if (!first) b.append(',');
                    first = false;
                    quote(e.getKey(), b);
                    b.append(':');
                    write(e.getValue(), b, canonical);
                }
                b.append('}');
            } else {
                throw new IllegalArgumentException("not JSON: " + v.getClass());
            }
        }

        private static String canonicalNumber(BigDecimal d) {
            BigDecimal n = d.stripTrailingZeros();
            if (n.scale() <= 0) return n.toBigInteger().toString();
            return n.toPlainString();
        }

        private static void quote(String str, StringBuilder b) {
            b.append('"');
            for (int k = 0; k < str.length(); k++) {
                char c = str.charAt(k);
                switch (c) {
                    case '"': b.append("\\\""); break;
                    case '\\': b.append("\\\\"); break;
                    case '\n': b.append("\\n"); break;
                    case '\r': b.append("\\r"); break;
                    case '\t': b.append("\\t"); break;
                    default:
                        if (c < 0x20 || c == 0x2028 || c == 0x2029) b.append(String.format("\\u%04x", (int) c));
                        else b.append(c);
                }
            }
            b.append('"');
        }
    }

    // ------------------------------------------------------------------------------------------
    // The code table of spec/loop.toml
    // ------------------------------------------------------------------------------------------

    record Code(String kind, String nextAction, String message, String status, String stopReason) {}

    static final Map<String, Code> CODES = new HashMap<>();
    static {
        CODES.put("REQUEST_LIMIT", new Code("limit", "STOP", "The run has reached its limit on tool requests.", "TRUNCATED", "MAX_REQUESTS"));
        CODES.put("INVALID_CALL", new Code("violation", "FIX_INPUT", "The call is malformed: it needs a non-blank string id, a tool name and an arguments object.", "REJECTED", "INVALID_CALL"));
        CODES.put("UNKNOWN_TOOL", new Code("violation", "FIX_INPUT", "No tool of that name is available.", "REJECTED", "UNKNOWN_TOOL"));
        CODES.put("INVALID_ARGUMENT", new Code("violation", "FIX_INPUT", "The arguments do not match the tool's input schema.", "REJECTED", "INVALID_ARGUMENT"));
        CODES.put("ID_CONFLICT", new Code("violation", "FIX_INPUT", "This call id was already used for a different request; use a new id.", "REJECTED", "ID_CONFLICT"));
        CODES.put("NOT_FOUND_OR_NOT_ACCESSIBLE", new Code("failure", "STOP", "The resource does not exist or is not accessible to the current identity.", "FAILED", "TERMINAL_ERROR"));
        CODES.put("DEADLINE_EXCEEDED", new Code("limit", "STOP", "The run's deadline has passed.", "TRUNCATED", "DEADLINE"));
        CODES.put("BUDGET_EXHAUSTED", new Code("limit", "STOP", "The run's execution budget is used up.", "TRUNCATED", "MAX_EXECUTIONS"));
        CODES.put("TOOL_BUDGET_EXHAUSTED", new Code("limit", "STOP", "This tool's execution budget is used up.", "TRUNCATED", "MAX_TOOL_EXECUTIONS"));
        CODES.put("DEPENDENCY_TEMPORARY", new Code("failure", "RETRY_WITH_BUDGET", "A dependency is temporarily unavailable.", "FAILED", "TERMINAL_ERROR"));
        CODES.put("INTERNAL_ERROR", new Code("failure", "STOP", "The tool failed with an internal error.", "FAILED", "TERMINAL_ERROR"));
        CODES.put("OUTCOME_UNKNOWN", new Code("unknown", "WAIT_FOR_RECONCILIATION", "The write was sent but its outcome is not known yet. "
            + "It will be checked before it is sent again; do not repeat it under other arguments.", "TRUNCATED", "UNRECONCILED"));
    }

    static final class ToolFailed extends Exception {
        final String category;
        ToolFailed(String category) {
            super(category, null, false, false);
            this.category = CODES.containsKey(category) && CODES.get(category).kind().equals("failure") ? category : "INTERNAL_ERROR";
        }
    }

    static final class ModelFailed extends Exception {
        ModelFailed() { super("model failed", null, false, false); }
    }

    // ------------------------------------------------------------------------------------------
    // JSON-RPC over stdin/stdout
    // ------------------------------------------------------------------------------------------

    private final BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    private final Writer out = new OutputStreamWriter(System.out, StandardCharsets.UTF_8);
    private long nextId = 0;

    private synchronized void send(Map<String, Object> msg) throws IOException {
        out.write(Json.write(msg));
        out.write('\n');
        out.flush();
    }

    @SuppressWarnings("unchecked")
    private Map<String, Object> read() throws IOException {
        String line;
        do {
            line = in.readLine();
            if (line == null) return null;
        } while (line.isBlank());
        return (Map<String, Object>) Json.parse(line);
    }

    /** Call the harness; the harness sends nothing else until it answers. */
    @SuppressWarnings("unchecked")
    private Object request(String method, Map<String, Object> params) throws IOException, ToolFailed {
        Map<String, Object> msg = new LinkedHashMap<>();
        msg.put("jsonrpc", "2.0");
        msg.put("id", ++nextId);
        msg.put("method", method);
        msg.put("params", params);
        send(msg);
        Map<String, Object> reply = read();
        if (reply == null) System.exit(0);
        if (reply.containsKey("error")) {
            Object data = ((Map<String, Object>) reply.get("error")).get("data");
            Object cat = data instanceof Map ? ((Map<String, Object>) data).get("category") : null;
            throw new ToolFailed(cat instanceof String ? (String) cat : "INTERNAL_ERROR");
        }
        return reply.get("result");
    }

    // ------------------------------------------------------------------------------------------
    // One run: a batch, or a whole loop
    // ------------------------------------------------------------------------------------------

    static final class Binding {
        final String key;
        Object success; // the stored output, or null when none
        boolean hasSuccess;
        Binding(String key) { this.key = key; }
    }

    private final class Run {
        final Map<String, Map<String, Object>> tools = new LinkedHashMap<>();
        final Map<String, Long> toolLimits = new HashMap<>();
        final String principal, mode, onLimit;
        final Long maxExecutions, maxRequests;
        final long maxRetries;
        final Long deadlineNanos;
        final Map<String, Binding> bindings = new HashMap<>();
        final Map<String, Long> perTool = new HashMap<>();
        long executed = 0, requests = 0;
        boolean limited = false;

        @SuppressWarnings("unchecked")
        Run(List<Object> toolList, String principal, String mode, String onLimit, Long maxExecutions,
            Long maxToolExecutions, Long maxRequests, long maxRetries, BigDecimal deadline) {
            for (Object o : toolList) {
                Map<String, Object> t = (Map<String, Object>) o;
                String name = (String) t.get("name");
                Object schema = t.get("inputSchema");
                tools.put(name, schema instanceof Map ? (Map<String, Object>) schema : new HashMap<>());
                Long limit = asLong(t.get("maxExecutions"));
                if (limit == null) limit = maxToolExecutions;
                if (limit != null) toolLimits.put(name, limit);
            }
            this.principal = principal;
            this.mode = mode;
            this.onLimit = onLimit;
            this.maxExecutions = maxExecutions;
            this.maxRequests = maxRequests;
            this.maxRetries = maxRetries;
            this.deadlineNanos = deadline == null ? null
                : System.nanoTime() + deadline.multiply(BigDecimal.valueOf(1_000_000_000L)).longValue();
        }

        boolean escalates(String code) {
            String kind = CODES.get(code).kind();
            return kind.equals("limit") ? onLimit.equals("throw") : mode.equals("abort");
        }

        Map<String, Object> error(Object call, String code, long index) {
            Code c = CODES.get(code);
            if (c.kind().equals("limit")) limited = true;
            Map<String, Object> a = new LinkedHashMap<>();
            Object id = call instanceof Map<?, ?> m ? m.get("id") : null;
            a.put("id", id instanceof String ? id : Json.NULL);
            a.put("status", "error");
            a.put("code", code);
            a.put("message", c.message());
            a.put("next_action", c.nextAction());
            a.put("request_id", "run:" + index);
            return a;
        }

        Map<String, Object> ok(String id, Object output) {
            Map<String, Object> a = new LinkedHashMap<>();
            a.put("id", id);
            a.put("status", "ok");
            a.put("output", output);
            return a;
        }

        boolean wellFormed(Object call) {
            if (!(call instanceof Map<?, ?> m)) return false;
            return m.get("id") instanceof String id && !blank(id)
                && m.get("name") instanceof String && m.get("arguments") instanceof Map;
        }

        @SuppressWarnings("unchecked")
        boolean argumentsValid(Map<String, Object> schema, Map<String, Object> args) {
            Map<String, Object> props = schema.get("properties") instanceof Map
                ? (Map<String, Object>) schema.get("properties") : Map.of();
            if (schema.get("required") instanceof List<?> req) {
                for (Object r : req) if (!args.containsKey(r)) return false;
            }
            boolean additional = !Boolean.FALSE.equals(schema.get("additionalProperties"));
            for (Map.Entry<String, Object> e : args.entrySet()) {
                Object sub = props.get(e.getKey());
                if (sub == null) {
                    if (!additional) return false;
                    continue;
                }
                Object type = ((Map<String, Object>) sub).get("type");
                Object v = e.getValue();
                if ("string".equals(type) && !(v instanceof String)) return false;
                if ("boolean".equals(type) && !(v instanceof Boolean)) return false;
                if ("integer".equals(type)) {
                    if (!(v instanceof BigDecimal d)) return false;
                    if (d.stripTrailingZeros().scale() > 0) return false;
                }
            }
            return true;
        }

        /** Concurrent mode: set instead of executing (the caller starts the execution). */
        Start start;

        /** Answer one request: R1's check order, then replay or execute. */
        Map<String, Object> answer(Object call, long index) throws IOException {
            return answer(call, index, false);
        }

        /** With {@code concurrent}, an execution is not run here: {@link #start} is set and null returned. */
        @SuppressWarnings("unchecked")
        Map<String, Object> answer(Object call, long index, boolean concurrent) throws IOException {
            requests++;
            if (maxRequests != null && index >= maxRequests) return error(call, "REQUEST_LIMIT", index);
            if (!wellFormed(call)) return error(call, "INVALID_CALL", index);
            Map<String, Object> c = (Map<String, Object>) call;
            String id = (String) c.get("id");
            String name = (String) c.get("name");
            Map<String, Object> args = (Map<String, Object>) c.get("arguments");
            if (!tools.containsKey(name)) return error(call, "UNKNOWN_TOOL", index);
            if (!argumentsValid(tools.get(name), args)) return error(call, "INVALID_ARGUMENT", index);
            String key = name + "\u0000" + Json.canonical(args);
            Binding b = bindings.get(id);
            if (b == null) {
                b = new Binding(key); // bound whatever happens next (R5)
                bindings.put(id, b);
            } else if (!b.key.equals(key)) {
                if (BUG.equals("conflict-reuse") && b.hasSuccess) return ok(id, b.success);
                return error(call, "ID_CONFLICT", index);
            } else if (b.hasSuccess && !BUG.equals("replay-reexecutes")) {
                return ok(id, b.success); // replay: nothing executes, nothing is charged (R6)
            }
            if (deadlineNanos != null && System.nanoTime() >= deadlineNanos) return error(call, "DEADLINE_EXCEEDED", index);
            boolean overBudget = maxExecutions != null && executed >= maxExecutions;
            if (overBudget && !BUG.equals("budget-after")) return error(call, "BUDGET_EXHAUSTED", index);
            Long toolLimit = toolLimits.get(name);
            if (toolLimit != null && perTool.getOrDefault(name, 0L) >= toolLimit) {
                return error(call, "TOOL_BUDGET_EXHAUSTED", index);
            }
            executed++; // charged before the side effect (R9)
            perTool.merge(name, 1L, Long::sum);
            if (concurrent) {
                start = new Start(index, id, name, args, b);
                return null;
            }
            long attempt = 0;
            while (true) {
                try {
                    Map<String, Object> params = new LinkedHashMap<>();
                    params.put("callId", id);
                    params.put("name", name);
                    params.put("arguments", args);
                    params.put("context", Map.of("principal", principal)); // the trusted principal (R16)
                    Object res = request("tool.execute", params);
                    Object output = res instanceof Map ? ((Map<String, Object>) res).get("output") : null;
                    if (!(res instanceof Map) || !((Map<String, Object>) res).containsKey("output")) {
                        throw new ToolFailed("INTERNAL_ERROR");
                    }
                    b.success = output;
                    b.hasSuccess = true;
                    if (overBudget && BUG.equals("budget-after")) return error(call, "BUDGET_EXHAUSTED", index);
                    return ok(id, output);
                } catch (ToolFailed f) {
                    if (f.category.equals("DEPENDENCY_TEMPORARY") && attempt < maxRetries) {
                        attempt++;
                        continue;
                    }
                    Map<String, Object> a = error(call, f.category, index); // never stored (R10)
                    return a;
                }
            }
        }
    }

    /** An execution taken up in concurrent mode, not yet started. */
    record Start(long index, String id, String name, Map<String, Object> args, Binding binding) {}

    // ------------------------------------------------------------------------------------------
    // Concurrent mode (protocol v1.1): a thread pool
    // ------------------------------------------------------------------------------------------

    static boolean overlaps(Object hints, String policy) {
        boolean readOnly = false, idempotent = false, destructive = true;
        if (hints instanceof Map<?, ?> h) {
            if (h.get("readOnlyHint") instanceof Boolean v) readOnly = v;
            if (h.get("idempotentHint") instanceof Boolean v) idempotent = v;
            if (h.get("destructiveHint") instanceof Boolean v) destructive = v;
        }
        if (policy.equals("all") || readOnly) return true;
        return policy.equals("idempotent") && idempotent && !destructive;
    }

    /** One execution in flight: its JSON-RPC id, the harness's answer, the pool thread running it. */
    static final class Flight {
        final Start s;
        final long rid;
        final boolean barrier;
        final CompletableFuture<Map<String, Object>> reply = new CompletableFuture<>();
        Future<Map<String, Object>> work;
        Flight(Start s, long rid, boolean barrier) { this.s = s; this.rid = rid; this.barrier = barrier; }
    }

    private synchronized long newId() { return ++nextId; }

    @SuppressWarnings("unchecked")
    private Map<String, Object> concurrentBatch(Map<String, Object> p, Map<String, Object> conc) throws IOException {
        String mode = p.get("mode") instanceof String m ? m : "abort";
        List<Object> toolList = (List<Object>) p.get("tools");
        Run run = new Run(toolList, (String) p.get("principal"), mode,
            mode.equals("abort") ? "throw" : "error-result", asLong(p.get("budget")), null, null, 0, null);
        Long n = asLong(conc.get("maxConcurrency"));
        int limit = (int) Math.max(1, n == null ? 1 : n);
        String policy = conc.get("overlap") instanceof String o ? o : "read-only";
        java.util.Set<String> barriers = new java.util.HashSet<>();
        for (Object o : toolList) {
            Map<String, Object> t = (Map<String, Object>) o;
            if (!overlaps(t.get("annotations"), policy)) barriers.add((String) t.get("name"));
        }
        List<Object> calls = p.get("calls") instanceof List ? (List<Object>) p.get("calls") : List.of();
        Map<Long, Map<String, Object>> answers = new TreeMap<>();
        Map<Long, Flight> flying = new LinkedHashMap<>();
        long[] end = null; // {index} of the lowest answer that ends the batch
        String endCode = null;
        ExecutorService pool = Executors.newFixedThreadPool(limit);
        try {
            for (int i = 0; i < calls.size(); i++) {
                Object call = calls.get(i);
                while (end == null && blocked(flying, limit, barriers, call)) {
                    Map<String, Object> a = land(flying, run);
                    long idx = (Long) a.remove("#index");
                    answers.put(idx, a);
                    if (endsBatch(run, a) && (end == null || idx < end[0])) { end = new long[] {idx}; endCode = (String) a.get("code"); }
                }
                if (end != null) break; // R34: nothing is taken up once an ending answer is known
                Map<String, Object> a = run.answer(call, i, true);
                if (a == null) {
                    Start st = run.start;
                    Flight f = new Flight(st, newId(), barriers.contains(st.name()));
                    flying.put(f.rid, f);
                    CountDownLatch sent = new CountDownLatch(1);
                    f.work = pool.submit(() -> execute(f, run.principal, sent));
                    try {
                        sent.await(); // tool.execute requests go out in take-up order (C2)
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                } else {
                    answers.put((long) i, a);
                    if (endsBatch(run, a) && end == null) { end = new long[] {i}; endCode = (String) a.get("code"); }
                }
            }
            // the answers owed: every execution of a request before the abort point (R32, R34)
            while (!flying.isEmpty() && (end == null || anyBefore(flying, end[0]))) {
                Map<String, Object> a = land(flying, run);
                long idx = (Long) a.remove("#index");
                answers.put(idx, a);
                if (endsBatch(run, a) && (end == null || idx < end[0])) { end = new long[] {idx}; endCode = (String) a.get("code"); }
            }
            for (Flight f : flying.values()) { // after the abort point: abandoned, and told (R35)
                Map<String, Object> msg = new LinkedHashMap<>();
                msg.put("jsonrpc", "2.0");
                msg.put("method", "$/cancelRequest");
                msg.put("params", Map.of("id", f.rid));
                send(msg);
                f.work.cancel(true);
            }
            flying.clear();
        } finally {
            pool.shutdownNow();
        }
        List<Object> results = new ArrayList<>();
        for (Map.Entry<Long, Map<String, Object>> e : answers.entrySet()) {
            if (end == null || e.getKey() < end[0]) results.add(e.getValue());
        }
        Map<String, Object> res = new LinkedHashMap<>();
        res.put("results", results);
        res.put("executed", run.executed);
        res.put("aborted", end == null ? Json.NULL : Map.of("index", end[0], "code", endCode));
        return res;
    }

    static boolean endsBatch(Run run, Map<String, Object> a) {
        return "error".equals(a.get("status")) && run.escalates((String) a.get("code"));
    }

    static boolean anyBefore(Map<Long, Flight> flying, long index) {
        for (Flight f : flying.values()) if (f.s.index() < index) return true;
        return false;
    }

    static boolean blocked(Map<Long, Flight> flying, int limit, java.util.Set<String> barriers, Object call) {
        if (flying.isEmpty()) return false;
        if (flying.size() >= limit) return true;
        for (Flight f : flying.values()) if (f.barrier) return true;
        Object name = call instanceof Map<?, ?> m ? m.get("name") : null;
        if (name instanceof String s && barriers.contains(s)) return true;
        Object id = call instanceof Map<?, ?> m ? m.get("id") : null;
        for (Flight f : flying.values()) if (f.s.id().equals(id)) return true; // R33: wait for it
        return false;
    }

    /** A pool thread: ask the harness to run the tool, block until it answers (or is cancelled). */
    private Map<String, Object> execute(Flight f, String principal, CountDownLatch sent) throws Exception {
        Map<String, Object> params = new LinkedHashMap<>();
        params.put("callId", f.s.id());
        params.put("name", f.s.name());
        params.put("arguments", f.s.args());
        params.put("context", Map.of("principal", principal));
        Map<String, Object> msg = new LinkedHashMap<>();
        msg.put("jsonrpc", "2.0");
        msg.put("id", f.rid);
        msg.put("method", "tool.execute");
        msg.put("params", params);
        try {
            send(msg);
        } finally {
            sent.countDown();
        }
        return f.reply.get(); // interrupted when the run abandons it
    }

    /** Say tool.waiting, route the answer the harness releases to its pool thread, land its result. */
    @SuppressWarnings("unchecked")
    private Map<String, Object> land(Map<Long, Flight> flying, Run run) throws IOException {
        Map<String, Object> note = new LinkedHashMap<>();
        note.put("jsonrpc", "2.0");
        note.put("method", "tool.waiting");
        note.put("params", Map.of());
        send(note);
        Flight f;
        Map<String, Object> reply;
        while (true) {
            reply = read();
            if (reply == null) System.exit(0);
            Object id = reply.get("id");
            Long rid = id instanceof BigDecimal d ? d.longValue() : null;
            if (!reply.containsKey("method") && rid != null && flying.containsKey(rid)) {
                f = flying.remove(rid);
                break;
            } // else: the answer of a cancelled execution: discarded (R35)
        }
        f.reply.complete(reply);
        Map<String, Object> got;
        try {
            got = f.work.get();
        } catch (InterruptedException | ExecutionException e) {
            got = Map.of("error", Map.of());
        }
        Map<String, Object> a;
        Object res = got.get("result");
        if (got.containsKey("error") || !(res instanceof Map<?, ?> r) || !r.containsKey("output")) {
            Object err = got.get("error");
            Object data = err instanceof Map<?, ?> e ? e.get("data") : null;
            Object cat = data instanceof Map<?, ?> dm ? dm.get("category") : null;
            String c = cat instanceof String s && CODES.containsKey(s) && CODES.get(s).kind().equals("failure")
                ? s : "INTERNAL_ERROR";
            a = new LinkedHashMap<>(run.error(f.s.id(), c, f.s.index()));
            a.put("id", f.s.id());
        } else {
            Object output = ((Map<String, Object>) res).get("output");
            f.s.binding().success = output;
            f.s.binding().hasSuccess = true;
            a = new LinkedHashMap<>(run.ok(f.s.id(), output));
        }
        a.put("#index", f.s.index());
        return a;
    }

    /** Unicode White_Space (R2). Not String.isBlank(): Java's whitespace differs from it both ways. */
    static final String WHITE_SPACE = "\t\n\u000b\f\r \u0085\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
        + "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000";

    static boolean blank(String s) {
        for (int k = 0; k < s.length(); k++) if (WHITE_SPACE.indexOf(s.charAt(k)) < 0) return false;
        return true;
    }

    static Long asLong(Object o) {
        return o instanceof BigDecimal d ? d.longValueExact() : null;
    }

    // ------------------------------------------------------------------------------------------
    // batch.run and loop.run
    // ------------------------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    private Map<String, Object> batchRun(Map<String, Object> p) throws IOException {
        String mode = p.get("mode") instanceof String m ? m : "abort";
        Run run = new Run((List<Object>) p.get("tools"), (String) p.get("principal"), mode,
            mode.equals("abort") ? "throw" : "error-result", asLong(p.get("budget")), null, null, 0, null);
        List<Object> calls = p.get("calls") instanceof List ? (List<Object>) p.get("calls") : List.of();
        List<Object> results = new ArrayList<>();
        Map<String, Object> res = new LinkedHashMap<>();
        res.put("results", results);
        for (int i = 0; i < calls.size(); i++) {
            Map<String, Object> a = run.answer(calls.get(i), i);
            if ("error".equals(a.get("status")) && run.escalates((String) a.get("code"))) {
                res.put("executed", run.executed);
                res.put("aborted", Map.of("index", i, "code", a.get("code")));
                return res;
            }
            results.add(a);
        }
        res.put("executed", run.executed);
        res.put("aborted", Json.NULL);
        return res;
    }

    @SuppressWarnings("unchecked")
    private Map<String, Object> loopRun(Map<String, Object> p) throws IOException {
        Map<String, Object> lim = p.get("limits") instanceof Map ? (Map<String, Object>) p.get("limits") : Map.of();
        Object deadline = lim.get("deadline");
        Long retries = asLong(lim.get("maxRetries"));
        Run run = new Run((List<Object>) p.get("tools"), (String) p.get("principal"),
            p.get("mode") instanceof String m ? m : "continue", p.get("onLimit") instanceof String o ? o : "throw",
            asLong(lim.get("maxExecutions")), asLong(lim.get("maxToolExecutions")), asLong(lim.get("maxRequests")),
            retries == null ? 0 : retries, deadline instanceof BigDecimal d ? d : null);
        Long maxRounds = asLong(lim.get("maxRounds"));
        List<Object> results = new ArrayList<>();
        List<Object> lastRound = new ArrayList<>();
        long rounds = 0;
        while (true) {
            if (run.deadlineNanos != null && System.nanoTime() >= run.deadlineNanos) {
                return outcome(run, results, rounds, "TRUNCATED", "DEADLINE", null, null);
            }
            if (maxRounds != null && rounds >= maxRounds) {
                return outcome(run, results, rounds, "TRUNCATED", "MAX_ROUNDS", null, null);
            }
            rounds++;
            Object move;
            try {
                Map<String, Object> params = new LinkedHashMap<>();
                params.put("round", rounds);
                params.put("results", lastRound);
                move = request("model.next", params);
            } catch (ToolFailed f) {
                return outcome(run, results, rounds, "FAILED", "MODEL_ERROR", null, null);
            }
            if (move instanceof Map<?, ?> m && m.size() == 1 && m.get("final") instanceof String fin) {
                return outcome(run, results, rounds, "COMPLETED", "FINAL_ANSWER", fin, null);
            }
            if (!(move instanceof Map<?, ?> m2 && m2.size() == 1 && m2.get("calls") instanceof List)) {
                return outcome(run, results, rounds, "FAILED", "MODEL_ERROR", null, null);
            }
            List<Object> calls = (List<Object>) ((Map<String, Object>) move).get("calls");
            lastRound = new ArrayList<>();
            for (Object call : calls) {
                long index = run.requests;
                Map<String, Object> a = run.answer(call, index);
                if ("error".equals(a.get("status")) && run.escalates((String) a.get("code"))) {
                    Code c = CODES.get((String) a.get("code"));
                    return outcome(run, results, rounds, c.status(), c.stopReason(), null,
                        Map.of("index", index, "code", a.get("code")));
                }
                results.add(a);
                lastRound.add(a);
            }
        }
    }

    private Map<String, Object> outcome(Run run, List<Object> results, long rounds, String status, String reason,
                                        String fin, Map<String, Object> aborted) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("status", status);
        o.put("stopReason", reason);
        o.put("coverage", status.equals("COMPLETED") && !run.limited ? "COMPLETE" : "PARTIAL");
        o.put("rounds", rounds);
        o.put("executed", run.executed);
        o.put("aborted", aborted == null ? Json.NULL : aborted);
        o.put("final", fin == null ? Json.NULL : fin);
        o.put("results", results);
        return o;
    }

    // ------------------------------------------------------------------------------------------
    // Write tools (protocol v1.2, SPEC.md section 6): a durable operation ledger in stateDir
    // ------------------------------------------------------------------------------------------

    /** tool.execute's answer was lost (a timeout): the write may or may not have been applied. */
    static final long LOST = -32002;

    /** One operation of the ledger: a write's state by its idempotency key. */
    static final class Op {
        String run;
        String tool;
        Object arguments;
        String state;
        Object result = Json.NULL;
    }

    /**
     * The operation ledger: an append-only journal of JSON lines ({@code ledger.jsonl} in the state
     * directory), one line per state change, each written and forced to the disk (FileChannel.force)
     * before the method returns, so the intent and the dispatch mark are durable before the send
     * (R38, R39). A change that touches several rows (the dispatch mark with what the budget counts,
     * R45) is one line, so it is all or nothing. Opening the ledger replays the journal; a last line
     * cut by a kill is dropped (it never completed) and the file truncated before it.
     */
    static final class Ledger implements AutoCloseable {
        final Map<String, Op> ops = new HashMap<>();
        final Map<String, Long> marks = new HashMap<>();
        final Map<String, Map<Long, Object>> answers = new HashMap<>();
        private final FileChannel ch;

        @SuppressWarnings("unchecked")
        Ledger(Path dir) throws IOException {
            Path path = dir.resolve("ledger.jsonl");
            boolean fresh = !Files.exists(path);
            ch = FileChannel.open(path, StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE);
            if (fresh) {
                ch.force(true);
                try (FileChannel d = FileChannel.open(dir, StandardOpenOption.READ)) {
                    d.force(true); // the new file's directory entry (Linux allows a directory to be forced)
                } catch (IOException ignored) {
                    // not supported on this platform: the file's own force is what we can do
                }
            }
            byte[] all = Files.readAllBytes(path);
            int start = 0;
            long good = 0;
            for (int k = 0; k < all.length; k++) {
                if (all[k] != '\n') continue;
                String line = new String(all, start, k - start, StandardCharsets.UTF_8);
                try {
                    apply((Map<String, Object>) Json.parse(line));
                } catch (RuntimeException e) {
                    break; // a damaged line: nothing after it completed
                }
                start = k + 1;
                good = start;
            }
            if (good < all.length) ch.truncate(good); // a line cut by a kill (no newline): it never happened
            ch.position(good);
        }

        @SuppressWarnings("unchecked")
        private void apply(Map<String, Object> c) {
            String t = (String) c.get("t");
            switch (t) {
                case "new" -> { // INSERT OR REPLACE: the intent of a write
                    Op op = new Op();
                    op.run = (String) c.get("run");
                    op.tool = (String) c.get("tool");
                    op.arguments = c.get("arguments");
                    op.state = (String) c.get("state");
                    ops.put((String) c.get("key"), op);
                }
                case "set" -> { // a state and its result
                    Op op = ops.get((String) c.get("key"));
                    if (op != null) {
                        op.state = (String) c.get("state");
                        op.result = c.get("result");
                    }
                }
                case "mark" -> { // the dispatch mark, with the run's count of dispatches (R45)
                    Op op = ops.get((String) c.get("key"));
                    if (op != null) op.state = "dispatched";
                    marks.merge((String) c.get("run"), 1L, Long::sum);
                }
                case "all" -> { // every operation of a run in one state moves to another
                    for (Op op : ops.values()) {
                        if (op.run.equals(c.get("run")) && op.state.equals(c.get("from"))) op.state = (String) c.get("to");
                    }
                }
                case "answer" -> answers.computeIfAbsent((String) c.get("run"), r -> new HashMap<>())
                    .putIfAbsent(asLong(c.get("idx")), c.get("answer"));
                default -> throw new IllegalArgumentException("unknown journal line " + t);
            }
        }

        /** Apply a change and make it durable: one journal line, forced to the disk before returning. */
        @SuppressWarnings("unchecked")
        void commit(Map<String, Object> change) {
            Map<String, Object> c = (Map<String, Object>) Json.parse(Json.write(change)); // numbers as read back
            apply(c);
            ByteBuffer buf = ByteBuffer.wrap((Json.write(change) + "\n").getBytes(StandardCharsets.UTF_8));
            try {
                while (buf.hasRemaining()) ch.write(buf);
                ch.force(false);
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        @Override public void close() throws IOException { ch.close(); }
    }

    static Map<String, Object> change(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int k = 0; k < kv.length; k += 2) m.put((String) kv[k], kv[k + 1] == null ? Json.NULL : kv[k + 1]);
        return m;
    }

    /**
     * One writes.run: every request of the run through the operation ledger in stateDir. Each state
     * change is one durable journal line, so a process killed at any point leaves the ledger as it was
     * after the last completed change; a new process on the same directory resumes the run (R46).
     */
    private final class WritesRun {
        final Map<String, Map<String, Object>> tools = new LinkedHashMap<>();
        final String principal;
        final String runId;
        final long budget;
        final List<Object> calls;
        final Path stateDir;
        Ledger ledger;

        @SuppressWarnings("unchecked")
        WritesRun(Map<String, Object> p) {
            for (Object t : (List<Object>) p.get("tools")) {
                Map<String, Object> tool = (Map<String, Object>) t;
                tools.put((String) tool.get("name"), tool);
            }
            principal = (String) p.get("principal");
            runId = (String) p.get("runId");
            budget = asLong(p.get("budget"));
            calls = (List<Object>) p.get("calls");
            stateDir = Path.of((String) p.get("stateDir"));
        }

        String state(String key) {
            Op op = ledger.ops.get(key);
            return op == null ? "absent" : op.state;
        }

        void intent(String key, Map<String, Object> call) {
            ledger.commit(change("t", "new", "key", key, "run", runId, "tool", call.get("name"),
                "arguments", call.get("arguments"), "state", "intent"));
        }

        void put(String key, String state, Object result) {
            ledger.commit(change("t", "set", "key", key, "state", state, "result", result));
        }

        /** The dispatch mark (W02), one journal line with what the budget counts (R45). */
        void mark(String key) {
            ledger.commit(change("t", "mark", "key", key, "run", runId));
        }

        long marks() {
            return ledger.marks.getOrDefault(runId, 0L);
        }

        // -- keys (R37) ---------------------------------------------------------------------
        @SuppressWarnings("unchecked")
        String key(Map<String, Object> call) {
            if (BUG.equals("key-by-call-id")) return (String) call.get("id");
            Map<String, Object> t = tools.get((String) call.get("name"));
            Map<String, Object> spec = (Map<String, Object>) t.get("key");
            Object scope = spec.get("scope") == null ? "principal" : spec.get("scope");
            Map<String, Object> args = (Map<String, Object>) call.get("arguments");
            Map<String, Object> keyArgs = new LinkedHashMap<>();
            for (Object a : (List<Object>) spec.get("arguments")) keyArgs.put((String) a, args.get((String) a));
            Map<String, Object> doc = change("tool", t.get("name"), "principal", principal, "scope", scope,
                "run", "run".equals(scope) ? runId : null, "arguments", keyArgs);
            try {
                byte[] h = MessageDigest.getInstance("SHA-256").digest(Json.canonical(doc).getBytes(StandardCharsets.UTF_8));
                StringBuilder b = new StringBuilder();
                for (byte x : h) b.append(String.format("%02x", x));
                return b.toString();
            } catch (NoSuchAlgorithmException e) {
                throw new IllegalStateException(e);
            }
        }

        // -- the external system ------------------------------------------------------------
        /** A request to the harness; the whole response message (result or error). */
        Map<String, Object> ask(String method, Map<String, Object> call, String key) throws IOException {
            Map<String, Object> params = new LinkedHashMap<>();
            if (method.equals("tool.execute")) params.put("callId", call.get("id"));
            params.put("name", call.get("name"));
            params.put("arguments", call.get("arguments"));
            params.put("context", change("principal", principal, "idempotencyKey", key));
            long id = ++nextId;
            send(change("jsonrpc", "2.0", "id", id, "method", method, "params", params));
            Map<String, Object> msg = read();
            while (msg != null && !msg.containsKey("method")
                    && !(msg.get("id") instanceof BigDecimal d && d.compareTo(BigDecimal.valueOf(id)) == 0)) {
                msg = read();
            }
            if (msg == null) System.exit(0);
            return msg;
        }

        /** Reconcile an unknown key (R43): its state afterwards. */
        @SuppressWarnings("unchecked")
        String lookup(String key, Map<String, Object> call) throws IOException {
            if ("none".equals(tools.get((String) call.get("name")).get("reconcile"))) return "unknown";
            Map<String, Object> msg = ask("tool.lookup", call, key);
            if (!(msg.get("result") instanceof Map<?, ?> r)) return "unknown"; // unavailable (W08)
            Map<String, Object> res = (Map<String, Object>) r;
            if (Boolean.TRUE.equals(res.get("applied"))) {
                put(key, "confirmed", res.get("output"));
                return "confirmed";
            }
            put(key, "failed", null);
            return "failed";
        }

        @SuppressWarnings("unchecked")
        Map<String, Object> dispatch(String key, Map<String, Object> call) throws IOException {
            if (!BUG.equals("record-after-dispatch")) mark(key); // durable before the send (R39)
            Map<String, Object> msg = ask("tool.execute", call, key);
            if (BUG.equals("record-after-dispatch")) mark(key);
            if (msg.containsKey("result")) {
                Object out = msg.get("result") instanceof Map<?, ?> r && r.containsKey("output") ? r.get("output") : Json.NULL;
                put(key, "confirmed", out);
                return change("id", call.get("id"), "status", "ok", "output", out);
            }
            Map<String, Object> err = msg.get("error") instanceof Map<?, ?> e ? (Map<String, Object>) e : Map.of();
            if (err.get("code") instanceof BigDecimal c && c.compareTo(BigDecimal.valueOf(LOST)) == 0) {
                if (BUG.equals("timeout-as-failure")) {
                    put(key, "failed", null);
                    return error(call, "DEPENDENCY_TEMPORARY");
                }
                put(key, "unknown", null);
                return error(call, "OUTCOME_UNKNOWN");
            }
            Object data = err.get("data");
            Object cat = data instanceof Map<?, ?> d ? d.get("category") : null;
            put(key, "failed", null);
            return error(call, cat instanceof String s && CODES.containsKey(s) && CODES.get(s).kind().equals("failure")
                ? s : "INTERNAL_ERROR");
        }

        Map<String, Object> error(Map<String, Object> call, String code) {
            Code c = CODES.get(code);
            return change("id", call.get("id"), "status", "error", "code", code, "message", c.message(),
                "next_action", c.nextAction());
        }

        // -- one request --------------------------------------------------------------------
        Map<String, Object> decide(Map<String, Object> call) throws IOException {
            String key = key(call);
            for (int attempt = 0; attempt < 4; attempt++) {
                String state = state(key);
                if (state.equals("confirmed")) { // answered from the ledger (R44)
                    return change("id", call.get("id"), "status", "ok", "output", ledger.ops.get(key).result);
                }
                if ((state.equals("unknown") || state.equals("dispatched")) && !BUG.equals("retry-without-lookup")) {
                    if (state.equals("dispatched")) put(key, "unknown", null);
                    if (lookup(key, call).equals("unknown")) return error(call, "OUTCOME_UNKNOWN");
                    continue;
                }
                if (state.equals("intent")) return dispatch(key, call); // an intent without a mark was never sent (R39)
                if (marks() >= budget) return error(call, "BUDGET_EXHAUSTED");
                intent(key, call);
                return dispatch(key, call);
            }
            return error(call, "OUTCOME_UNKNOWN");
        }

        List<String> keysIn(String... states) {
            List<String> keys = new ArrayList<>();
            for (Map.Entry<String, Op> e : ledger.ops.entrySet()) {
                if (e.getValue().run.equals(runId) && List.of(states).contains(e.getValue().state)) keys.add(e.getKey());
            }
            keys.sort(null);
            return keys;
        }

        /** Look up each unknown operation of the run once (R46): in recovery, and at the end of the run. */
        void reconcileAll(boolean recovery) throws IOException {
            if (BUG.equals("retry-without-lookup")) return;
            for (String key : keysIn("unknown")) {
                Op op = ledger.ops.get(key);
                Map<String, Object> call = change("id", "", "name", op.tool, "arguments", op.arguments);
                if (recovery && BUG.equals("failed-before-lookup")) {
                    put(key, "failed", null); // the bug: settled before the answer (a kill at the lookup keeps it)
                    if (lookup(key, call).equals("unknown")) put(key, "unknown", null);
                    continue;
                }
                lookup(key, call);
            }
        }

        @SuppressWarnings("unchecked")
        Map<String, Object> run() throws IOException {
            ledger = new Ledger(stateDir);
            try {
                // recovery (R46): a dispatch mark without a result is an unknown outcome; reconcile them all first
                if (!BUG.equals("retry-without-lookup")) {
                    ledger.commit(change("t", "all", "run", runId, "from", "dispatched", "to", "unknown"));
                }
                reconcileAll(true);
                List<Object> results = new ArrayList<>();
                for (int i = 0; i < calls.size(); i++) {
                    Map<Long, Object> before = ledger.answers.get(runId);
                    if (before != null && before.containsKey((long) i)) {
                        results.add(before.get((long) i)); // answered before a restart
                        continue;
                    }
                    Map<String, Object> a = decide((Map<String, Object>) calls.get(i));
                    ledger.commit(change("t", "answer", "run", runId, "idx", i, "answer", a));
                    results.add(a);
                }
                // the end of the run (R46): never-sent intents are abandoned, unknown outcomes reconciled once more
                ledger.commit(change("t", "all", "run", runId, "from", "intent", "to", "failed"));
                reconcileAll(false);
                List<String> unknown = keysIn("unknown", "dispatched");
                return change("results", results, "status", unknown.isEmpty() ? "COMPLETED" : "TRUNCATED",
                    "stopReason", unknown.isEmpty() ? null : "UNRECONCILED", "unreconciled", unknown);
            } finally {
                ledger.close();
            }
        }
    }

    // ------------------------------------------------------------------------------------------
    // The request loop
    // ------------------------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    private void serve() throws IOException {
        Map<String, Object> msg;
        while ((msg = read()) != null) {
            Object id = msg.get("id");
            String method = (String) msg.get("method");
            if (method == null) continue; // a response nobody waits for (a cancelled execution's, C6)
            Map<String, Object> params = msg.get("params") instanceof Map ? (Map<String, Object>) msg.get("params") : Map.of();
            Map<String, Object> reply = new LinkedHashMap<>();
            reply.put("jsonrpc", "2.0");
            reply.put("id", id);
            try {
                switch (method) {
                    case "initialize" -> reply.put("result", Map.of("name", "example-java", "version", "1.2",
                        "capabilities", CONCURRENT ? Map.of("batch", true, "loop", true, "writes", true, "concurrency", true)
                                                   : Map.of("batch", true, "loop", true, "writes", true)));
                    case "batch.run" -> reply.put("result", CONCURRENT && params.get("concurrency") instanceof Map c
                        ? concurrentBatch(params, (Map<String, Object>) c) : batchRun(params));
                    case "loop.run" -> reply.put("result", loopRun(params));
                    case "writes.run" -> reply.put("result", new WritesRun(params).run());
                    case "shutdown" -> {
                        reply.put("result", Json.NULL);
                        send(reply);
                        return;
                    }
                    default -> reply.put("error", Map.of("code", -32601, "message", "method not found"));
                }
            } catch (RuntimeException e) {
                System.err.println("executor: bad params: " + e);
                reply.remove("result");
                reply.put("error", Map.of("code", -32602, "message", "invalid params"));
            }
            send(reply);
        }
    }

    /**
     * The deliberate bugs: three of the batch, five of the write tools (the broken variants of
     * spec/writes.toml, the last a recovery that is not crash-safe), as in the Python example.
     */
    static final List<String> BUGS = List.of("replay-reexecutes", "conflict-reuse", "budget-after",
        "key-by-call-id", "retry-without-lookup", "record-after-dispatch", "timeout-as-failure",
        "failed-before-lookup");

    /** The deliberate bug (--bug NAME), or "" for the correct executor. */
    static String BUG = "";

    /** --concurrent: protocol v1.1's concurrency capability, batches on a thread pool. */
    static boolean CONCURRENT = false;

    public static void main(String[] args) throws IOException {
        List<String> rest = new ArrayList<>(List.of(args));
        CONCURRENT = rest.remove("--concurrent");
        if (rest.size() == 2 && rest.get(0).equals("--bug") && BUGS.contains(rest.get(1))) {
            BUG = rest.get(1);
        } else if (!rest.isEmpty()) {
            System.err.println("usage: LoopspecExecutor [--concurrent] [--bug " + String.join("|", BUGS) + "]");
            System.exit(2);
        }
        new LoopspecExecutor().serve();
    }
}
