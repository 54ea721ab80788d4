"""Section 6 as data (spec/writes.toml): loaded, validated, consistent with SPEC.md's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopspec import load_rules
from loopspec._spec import SpecError
from loopspec._writes_spec import load_write_spec, parse_write_spec

WRITES = Path(__file__).resolve().parents[1] / "spec" / "writes.toml"


def test_the_shipped_write_spec_loads_and_names_known_rules() -> None:
    ws = load_write_spec()
    rules = {r.id: r for r in load_rules()}
    assert [s.id for s in ws.states] == ["absent", "intent", "dispatched", "confirmed", "failed", "unknown"]
    for t in ws.transitions:
        assert set(t.rules) <= set(rules), t.id
    for v in ws.variants:
        assert v.fields["breaks"] in rules, v.id
    assert {c.id for c in ws.codes} == {"OUTCOME_UNKNOWN"}
    section6 = [r for r in rules.values() if 36 <= int(r.id[1:]) <= 46]
    assert len(section6) == 11
    cited = {i for r in section6 for i in r.invariants}
    assert cited == {i.id for i in ws.invariants}, "every section 6 invariant is checked by a rule of section 6"


def test_section_6_codes_do_not_collide_with_the_loop_codes() -> None:
    from loopspec import load_spec

    assert not {c.id for c in load_write_spec().codes} & {c.id for c in load_spec().codes}
    assert not {r.id for r in load_write_spec().stop_reasons} & {r.id for r in load_spec().stop_reasons}


@pytest.mark.parametrize(("old", "new", "message"), [
    ('to = "intent"', 'to = "nowhere"', "op_transition W01: to: unknown state 'nowhere'"),
    ('id = "INV-W-ONE-EFFECT"', 'id = "INV-ONE-EFFECT"', "start with INV-W-"),
    ('after = "record_intent"', 'after = "teleport"', "crash_point after-intent: after: not a transition name"),
    ('stop_reason = "UNRECONCILED"', 'stop_reason = "NOPE"', "code OUTCOME_UNKNOWN: stop_reason"),
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
