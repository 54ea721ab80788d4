"""Section 6 as data (spec/writes.toml): loaded, validated, consistent with SPEC.md's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopspec import load_rules
from loopspec.spec.base import SpecError
from loopspec.spec.writes import load_write_spec, parse_write_spec

WRITES = Path(__file__).resolve().parents[1] / "spec" / "writes.toml"


def test_the_shipped_write_spec_loads_and_names_known_rules() -> None:
    ws = load_write_spec()
    rules = {r.id: r for r in load_rules()}
    assert [s.id for s in ws.states] == ["absent", "intent", "dispatched", "confirmed", "failed", "unknown"]
    for t in ws.transitions:
        assert set(t.rules) <= set(rules), t.id
    for v in ws.variants:
        assert v.fields["breaks"] in rules, v.id
    assert not ws.codes and not ws.stop_reasons  # they are loop.toml's (one table of codes)
    section6 = [r for r in rules.values() if 36 <= int(r.id[1:]) <= 46]
    assert len(section6) == 11
    cited = {i for r in section6 for i in r.invariants}
    assert cited == {i.id for i in ws.invariants}, "every section 6 invariant is checked by a rule of section 6"


def test_R42_R46_section_6_code_and_stop_reason_are_in_the_loop_tables() -> None:
    from loopspec import load_spec
    from loopspec.core.rules import CODE_TABLE

    spec = load_spec()
    c = next(c for c in spec.codes if c.id == "OUTCOME_UNKNOWN")
    assert (c.kind, c.next_action, c.stop_reason) == ("unknown", "WAIT_FOR_RECONCILIATION", "UNRECONCILED")
    assert spec.stop_reason("UNRECONCILED").status == "TRUNCATED"
    assert CODE_TABLE["OUTCOME_UNKNOWN"][:3] == ("unknown", "WAIT_FOR_RECONCILIATION", "UNRECONCILED")
    text = WRITES.read_text(encoding="utf-8") + '\n[[code]]\nid = "X"\n'
    with pytest.raises(SpecError, match=r"in loop\.toml"):
        parse_write_spec(text, "w.toml")


@pytest.mark.parametrize(("old", "new", "message"), [
    ('to = "intent"', 'to = "nowhere"', "op_transition W01: to: unknown state 'nowhere'"),
    ('id = "INV-W-ONE-EFFECT"', 'id = "INV-ONE-EFFECT"', "start with INV-W-"),
    ('after = "record_intent"', 'after = "teleport"', "crash_point after-intent: after: not a transition name"),
    ('default_scope = "principal"', 'default_scope = "galaxy"', "kinds: default_scope"),
])
def test_definition_errors_name_the_entry_and_field(old: str, new: str, message: str) -> None:
    text = WRITES.read_text(encoding="utf-8")
    assert old in text
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        parse_write_spec(text.replace(old, new, 1), "w.toml")


def test_an_unreachable_state_is_a_definition_error() -> None:
    text = WRITES.read_text(encoding="utf-8") + '\n[[op_state]]\nid = "limbo"\ndoc = "never reached"\n'
    with pytest.raises(SpecError, match="unreachable from the initial state: \\['limbo'\\]"):
        parse_write_spec(text, "w.toml")
