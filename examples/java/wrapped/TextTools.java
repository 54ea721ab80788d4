/*
 * TextTools: a small batch executor of the kind that exists before anyone fuzzes it. It is the "executor you
 * cannot change" of docs/adapters.md: TextToolsAdapter.java wraps it for `loopspec fuzz` without editing it.
 *
 * Two tools, a fixed registry: `length` (the number of code points of a text) and `upper` (the text in upper
 * case). A batch is a list of calls; a call's result is cached by its id for the batch: the same id with the
 * same call gives the cached result again, the same id with another call is refused. Anything it does not
 * like ends the whole batch with an exception: a missing or blank id, a missing argument, an unknown tool, an
 * id reused for another call, a budget used up.
 *
 * The one seam it has is the ToolRunner a caller passes in: production code passes the real tools; the
 * adapter passes a runner that asks the loopspec harness instead (tool.execute).
 *
 * What fuzzing it finds (docs/adapters.md explains each): answers of calls that already ran are lost when a
 * later call ends the batch; isBlank() accepts an id of Unicode White_Space (U+00A0) and refuses a valid id
 * (U+001C); a call without a tool name throws a NullPointerException; the argument's type and any other
 * argument are never checked; an unknown tool is refused as a malformed call.
 */

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

public final class TextTools {
    private TextTools() {}

    /** One proposed call: its id, the tool's name and its one text argument. */
    public record Call(String id, String name, String argument) {}

    /** What a batch gives back: one output per call, in order, and how many tools ran. */
    public record Result(List<String> outputs, int executed) {}

    /** Runs a tool. Production passes the real tools; a test harness may pass its own. */
    public interface ToolRunner {
        String run(Call call);
    }

    /** The tools themselves. */
    public static final ToolRunner REAL_TOOLS = call -> call.name().equals("length")
            ? Integer.toString(call.argument().codePointCount(0, call.argument().length()))
            : call.argument().toUpperCase(Locale.ROOT);

    /** Why a batch was refused. */
    public enum Reason { CONTRACT, CONFLICT, BUDGET }

    /** The exception that refuses a whole batch. */
    public static final class BatchRefused extends IllegalArgumentException {
        public final Reason reason;

        BatchRefused(Reason reason) {
            super(reason.name().toLowerCase(Locale.ROOT));
            this.reason = reason;
        }
    }

    private static final Set<String> TOOLS = Set.of("length", "upper");

    private record Cached(Call call, String output) {}

    /** Answers a batch of calls with at most {@code budget} tool runs, or refuses it as a whole. */
    public static Result run(List<Call> calls, int budget, ToolRunner tools) {
        if (budget < 0) throw new BatchRefused(Reason.BUDGET);
        Map<String, Cached> byId = new HashMap<>();
        List<String> outputs = new ArrayList<>();
        int executed = 0;
        for (Call call : calls) {
            boolean wellFormed = call.id() != null && !call.id().isBlank() && call.argument() != null
                    && TOOLS.contains(call.name());
            if (!wellFormed) throw new BatchRefused(Reason.CONTRACT);
            Cached seen = byId.get(call.id());
            if (seen != null) {
                if (!seen.call().equals(call)) throw new BatchRefused(Reason.CONFLICT);
                outputs.add(seen.output());
                continue;
            }
            if (executed >= budget) throw new BatchRefused(Reason.BUDGET);
            executed++;
            String output = tools.run(call);
            byId.put(call.id(), new Cached(call, output));
            outputs.add(output);
        }
        return new Result(List.copyOf(outputs), executed);
    }
}
