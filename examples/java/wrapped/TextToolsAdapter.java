/*
 * The loopspec adapter for TextTools (docs/adapters.md, "Wrapping an executor you cannot change").
 *
 * TextTools is not edited. The adapter speaks the adapter protocol (spec/PROTOCOL.md) on stdin/stdout,
 * turns each batch.run into TextTools.run, and does two things only:
 *
 *  1. it passes TextTools a ToolRunner that asks the harness (tool.execute) instead of running the tool, so
 *     the harness sees every execution and decides its outcome; the output travels as JSON text, so what
 *     the harness returned is what the answer carries;
 *  2. it turns what TextTools throws for the whole batch into protocol 1.3's rejection,
 *     {"rejected": {"code"}, "executed": n}: the reason the exception carries gives the code (never its
 *     message, R15), a tool failure its category. Anything else it throws is answered as a JSON-RPC error.
 *
 *   javac -d build examples/java/wrapped/*.java
 *   loopspec fuzz --impl "java -cp build TextToolsAdapter" --tools examples/java/wrapped/text-tools.json
 *
 * The tools file declares the fixed registry (length, upper) and what TextTools does not support: continue
 * mode and error answers per call. stdout carries only protocol messages.
 */

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

public final class TextToolsAdapter {
    private final BufferedReader in;
    private final PrintWriter out;
    private long nextId = 1;

    private TextToolsAdapter(BufferedReader in, PrintWriter out) {
        this.in = in;
        this.out = out;
    }

    public static void main(String[] args) throws IOException {
        var in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        var out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), false);
        new TextToolsAdapter(in, out).serve();
    }

    /** A tool failure the harness reported: its category ends the batch. */
    private static final class ToolFailed extends RuntimeException {
        final String category;

        ToolFailed(String category) {
            super(category);
            this.category = category;
        }
    }

    private void serve() throws IOException {
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Object msg = Json.parse(line);
            if (!(msg instanceof Map<?, ?> m) || !(m.get("method") instanceof String method)) continue;
            Object id = m.get("id");
            switch (method) {
                case "initialize" -> reply(id, Json.object("name", "text-tools", "version", "1",
                        "capabilities", Json.object("batch", true, "loop", false)));
                case "shutdown" -> {
                    reply(id, Json.NULL);
                    return;
                }
                case "batch.run" -> {
                    try {
                        reply(id, batch((Map<?, ?>) m.get("params")));
                    } catch (RuntimeException crash) {  // not a refusal: the executor broke
                        error(id, -32603, crash.getClass().getSimpleName());
                    }
                }
                default -> error(id, -32601, "no method " + method);
            }
        }
    }

    private Object batch(Map<?, ?> params) throws IOException {
        List<TextTools.Call> calls = new ArrayList<>();
        Map<TextTools.Call, Object> proposed = new IdentityHashMap<>();  // each call's arguments as proposed
        for (Object c : (List<?>) params.get("calls")) {
            TextTools.Call call = call(c);
            calls.add(call);
            proposed.put(call, c instanceof Map<?, ?> m ? m.get("arguments") : null);
        }
        String principal = (String) params.get("principal");
        int budget = Integer.parseInt(((Json.Num) params.get("budget")).text());
        int[] executed = {0};
        TextTools.ToolRunner viaHarness = call -> {  // the one hook: the harness runs the tool
            executed[0]++;
            return execute(call, proposed.get(call), principal);
        };
        TextTools.Result result;
        try {
            result = TextTools.run(calls, budget, viaHarness);
        } catch (TextTools.BatchRefused refused) {
            return rejected(switch (refused.reason) {
                case CONTRACT -> "INVALID_CALL";
                case CONFLICT -> "ID_CONFLICT";
                case BUDGET -> "BUDGET_EXHAUSTED";
            }, executed[0]);
        } catch (ToolFailed failed) {
            return rejected(failed.category, executed[0]);
        } catch (UncheckedIOException broken) {
            throw broken.getCause();
        }
        List<Object> results = new ArrayList<>();
        for (int i = 0; i < calls.size(); i++) {
            results.add(Json.object("id", calls.get(i).id(), "status", "ok",
                    "output", Json.parse(result.outputs().get(i))));
        }
        return Json.object("results", results, "executed", result.executed(), "aborted", Json.NULL);
    }

    private static Object rejected(String code, int executed) {
        return Json.object("rejected", Json.object("code", code), "executed", executed);
    }

    /** A proposed call as TextTools takes it: strings, or null where the proposal has something else. */
    private static TextTools.Call call(Object c) {
        if (!(c instanceof Map<?, ?> m)) return new TextTools.Call(null, null, null);
        String id = m.get("id") instanceof String s ? s : null;
        String name = m.get("name") instanceof String s ? s : null;
        String text = null;
        if (m.get("arguments") instanceof Map<?, ?> args && args.containsKey("text")) {
            Object t = args.get("text");
            text = t instanceof String s ? s : Json.write(t);
        }
        return new TextTools.Call(id, name, text);
    }

    /** tool.execute on the harness, with the call's id and its arguments as proposed; the output as JSON text. */
    private String execute(TextTools.Call call, Object arguments, String principal) {
        long rid = nextId++;
        Map<String, Object> req = Json.object("jsonrpc", "2.0", "id", rid, "method", "tool.execute",
                "params", Json.object("callId", call.id(), "name", call.name(), "arguments", arguments,
                        "context", Json.object("principal", principal)));
        try {
            send(req);
            while (true) {
                String line = in.readLine();
                if (line == null) throw new IOException("the harness closed stdin");
                if (line.isBlank()) continue;
                if (!(Json.parse(line) instanceof Map<?, ?> m) || !(m.get("id") instanceof Json.Num n)
                        || !n.text().equals(Long.toString(rid))) continue;
                if (m.get("error") instanceof Map<?, ?> err) {
                    Object data = err.get("data");
                    Object cat = data instanceof Map<?, ?> d ? d.get("category") : null;
                    throw new ToolFailed(cat instanceof String s ? s : "INTERNAL_ERROR");
                }
                Object result = m.get("result");
                return Json.write(result instanceof Map<?, ?> r ? r.get("output") : Json.NULL);
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private void reply(Object id, Object result) {
        send(Json.object("jsonrpc", "2.0", "id", id, "result", result));
    }

    private void error(Object id, int code, String message) {
        send(Json.object("jsonrpc", "2.0", "id", id, "error", Json.object("code", code, "message", message)));
    }

    private void send(Object msg) {
        out.print(Json.write(msg));
        out.print('\n');
        out.flush();
    }

    private static final class UncheckedIOException extends RuntimeException {
        UncheckedIOException(IOException cause) {
            super(cause);
        }

        @Override
        public synchronized IOException getCause() {
            return (IOException) super.getCause();
        }
    }

    /** Just enough JSON: objects keep their order, numbers keep their text, null is {@link #NULL}. */
    static final class Json {
        static final Object NULL = new Object() {
            @Override
            public String toString() {
                return "null";
            }
        };

        record Num(String text) {}

        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        static Map<String, Object> object(Object... kv) {
            Map<String, Object> m = new LinkedHashMap<>();
            for (int k = 0; k < kv.length; k += 2) m.put((String) kv[k], kv[k + 1]);
            return m;
        }

        static Object parse(String text) {
            Json p = new Json(text);
            Object v = p.value();
            p.space();
            if (p.i != text.length()) throw new IllegalArgumentException("trailing characters");
            return v;
        }

        private void space() {
            while (i < s.length() && " \t\r\n".indexOf(s.charAt(i)) >= 0) i++;
        }

        private Object value() {
            space();
            char c = s.charAt(i);
            if (c == '{') {
                i++;
                Map<String, Object> m = new LinkedHashMap<>();
                space();
                if (s.charAt(i) == '}') {
                    i++;
                    return m;
                }
                while (true) {
                    space();
                    String k = string();
                    space();
                    i++;  // ':'
                    m.put(k, value());
                    space();
                    if (s.charAt(i++) == '}') return m;
                }
            }
            if (c == '[') {
                i++;
                List<Object> l = new ArrayList<>();
                space();
                if (s.charAt(i) == ']') {
                    i++;
                    return l;
                }
                while (true) {
                    l.add(value());
                    space();
                    if (s.charAt(i++) == ']') return l;
                }
            }
            if (c == '"') return string();
            if (s.startsWith("true", i)) {
                i += 4;
                return Boolean.TRUE;
            }
            if (s.startsWith("false", i)) {
                i += 5;
                return Boolean.FALSE;
            }
            if (s.startsWith("null", i)) {
                i += 4;
                return NULL;
            }
            int start = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) i++;
            return new Num(s.substring(start, i));
        }

        private String string() {
            StringBuilder b = new StringBuilder();
            i++;  // '"'
            while (true) {
                char c = s.charAt(i++);
                if (c == '"') return b.toString();
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                char e = s.charAt(i++);
                switch (e) {
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'n' -> b.append('\n');
                    case 'r' -> b.append('\r');
                    case 't' -> b.append('\t');
                    case 'u' -> {
                        b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                        i += 4;
                    }
                    default -> b.append(e);
                }
            }
        }

        static String write(Object v) {
            StringBuilder b = new StringBuilder();
            write(b, v);
            return b.toString();
        }

        private static void write(StringBuilder b, Object v) {
            if (v == null || v == NULL) {
                b.append("null");
            } else if (v instanceof String str) {
                b.append('"');
                for (int k = 0; k < str.length(); k++) {
                    char c = str.charAt(k);
                    if (c == '"' || c == '\\') b.append('\\').append(c);
                    else if (c < 0x20 || c == 0x2028 || c == 0x2029) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
                }
                b.append('"');
            } else if (v instanceof Num n) {
                b.append(n.text());
            } else if (v instanceof Map<?, ?> m) {
                b.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    if (!first) b.append(',');
                    first = false;
                    write(b, e.getKey());
                    b.append(':');
                    write(b, e.getValue());
                }
                b.append('}');
            } else if (v instanceof List<?> l) {
                b.append('[');
                for (int k = 0; k < l.size(); k++) {
                    if (k > 0) b.append(',');
                    write(b, l.get(k));
                }
                b.append(']');
            } else {
                b.append(v);  // Boolean, Integer, Long
            }
        }
    }
}
