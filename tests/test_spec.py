"""The spec loader: the shipped spec is valid; malformed specs are rejected naming the entry (R0)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loopspec import SpecError, load_rules, load_spec
from loopspec.core.rules import check_against_spec
from loopspec.spec.base import default_spec_path
from loopspec.spec.loader import parse_spec
from loopspec.spec.writes import load_write_spec

SPEC_TEXT = default_spec_path().read_text(encoding="utf-8")


def mutate(old: str, new: str, count: int = 1) -> str:
    assert SPEC_TEXT.count(old) >= 1, f"fixture text not found: {old!r}"
    return SPEC_TEXT.replace(old, new, count)


def test_shipped_spec_loads_with_the_six_phases() -> None:
    spec = load_spec()
    assert spec.phases == ("proposed", "validated", "executing", "returned", "decided", "terminal")
    assert spec.initial.id == "decided"
    assert {s.status for s in spec.terminal_states} == {"COMPLETED", "TRUNCATED", "REJECTED", "FAILED", "CANCELLED"}


def test_core_agrees_with_spec_data() -> None:
    """Codes, guards and invariants of the core are validated against loop.toml (one source of truth)."""
    assert check_against_spec(load_spec()) == []


def test_every_rule_cites_known_invariants_and_every_invariant_is_cited() -> None:
    spec = load_spec()
    rules = load_rules(spec=spec)
    ids = [r.id for r in rules]
    assert ids == [f"R{i}" for i in range(len(ids))], "rules are numbered R0, R1, ... without gaps"
    cited = {i for r in rules for i in r.invariants}
    writes = {i.id for i in load_write_spec().invariants}  # section 6's, in writes.toml
    assert cited == {i.id for i in spec.invariants} | writes, "every invariant is checked by at least one rule"


def test_every_rule_cited_by_a_transition_exists() -> None:
    spec = load_spec()
    rule_ids = {r.id for r in load_rules(spec=spec)}
    for t in spec.transitions:
        assert set(t.rules) <= rule_ids, t.id


def test_as_dict_is_plain_data() -> None:
    d = load_spec().as_dict()
    assert d["initial"] == "decided"
    assert len(d["transitions"]) == len(load_spec().transitions)


@pytest.mark.parametrize(
    ("old", "new", "pattern"),
    [
        ('dest = "rejected"\nwhen = ["escalates_violation"]', 'dest = "nowhere"\nwhen = ["escalates_violation"]',
         r"loop\.toml:\d+: transition T24: dest: unknown state 'nowhere'"),
        ('id = "T13"', 'id = "T12"', r"transition T12: id: duplicate id 'T12'"),
        ('id = "INV-SAFE-ERRORS"', 'id = "INV-EXEC-BUDGET"', r"invariant INV-EXEC-BUDGET: id: duplicate id"),
        ('when = ["id_replay"]', 'when = ["id_replayed"]', r"transition T13: when/unless: unknown guard 'id_replayed'"),
        ('source = "returned"\ndest = "rejected"', 'source = "rejected"\ndest = "rejected"',
         r"transition T24: source: terminal state 'rejected' cannot have an exit"),
        ('stop_reason = "DEADLINE"\nrules = ["R19"]', 'stop_reason = "FINAL_ANSWER"\nrules = ["R19"]',
         r"transition T01: stop_reason: stop reason FINAL_ANSWER has status COMPLETED, but 'truncated' is TRUNCATED"),
        ('id = "decided"\nphase = "decided"\ninitial = true', 'id = "decided"\nphase = "decided"',
         r"exactly one initial state is required, found 0"),
        ('rules = ["R9", "R16"]', 'rules = ["nine"]', r"transition T20: rules: rule ids look like R12"),
        ('kind = "violation"\nnext_action = "FIX_INPUT"\nstop_reason = "UNKNOWN_TOOL"',
         'kind = "oops"\nnext_action = "FIX_INPUT"\nstop_reason = "UNKNOWN_TOOL"', r"code UNKNOWN_TOOL: kind: unknown kind 'oops'"),
    ],
)
def test_malformed_spec_is_rejected_naming_the_entry(old: str, new: str, pattern: str) -> None:
    with pytest.raises(SpecError, match=pattern):
        parse_spec(mutate(old, new), path="spec/loop.toml")


def test_unreachable_state_is_rejected() -> None:
    text = SPEC_TEXT + '\n[[state]]\nid = "limbo"\nphase = "returned"\ndoc = "nothing enters it"\n'
    with pytest.raises(SpecError, match=r"state limbo: id: unreachable from the initial state 'decided'"):
        parse_spec(text)


def test_non_terminal_trap_state_is_rejected() -> None:
    # `executing` loses every exit except a self-loop: it can never reach a terminal state
    text = SPEC_TEXT.replace('source = "executing"\ndest = "returned"', 'source = "executing"\ndest = "executing"')
    text = text.replace('source = "executing"\ndest = "proposed"', 'source = "executing"\ndest = "executing"')
    text = text.replace('"decided", "proposed", "validated", "executing", "waiting", "returned"',
                        '"decided", "proposed", "validated", "waiting", "returned"')
    with pytest.raises(SpecError, match=r"state executing: id: non-terminal trap"):
        parse_spec(text)


def test_unguarded_fallback_must_come_last() -> None:
    # give T26 no guard: the transitions after it in its group (T34, section 6, then T27) can never fire
    text = mutate('when = ["escalates_limit"]\n', "")
    with pytest.raises(SpecError, match=r"transition T26: when: unguarded fallback must be the last .* T34 can never fire"):
        parse_spec(text)


def test_unused_guard_is_rejected() -> None:
    text = SPEC_TEXT + '\n[[guard]]\nid = "moon_is_full"\ndoc = "never used"\n'
    with pytest.raises(SpecError, match=r"guard moon_is_full: id: declared but used by no transition"):
        parse_spec(text)


def test_invalid_toml_names_the_line() -> None:
    with pytest.raises(SpecError, match=r"x\.toml:3: not valid TOML"):
        parse_spec('[meta]\nname = "x"\nbroken = = 1\n', path="x.toml")


def test_spec_error_lines_point_at_the_entry() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(mutate('id = "T13"', 'id = "T12"'), path="loop.toml")
    line = SPEC_TEXT.splitlines()[info.value.line - 1]
    assert re.match(r'id = "T1[23]"', line)


def test_rules_file_citing_unknown_invariant_is_rejected(tmp_path: Path) -> None:
    p = tmp_path / "SPEC.md"
    p.write_text("## 1\n\n### R0 (MUST) Something\n\nChecked by: INV-NOPE\n")
    with pytest.raises(SpecError, match=r"rule R0: cites unknown invariant INV-NOPE"):
        load_rules(p)


def test_rule_without_checked_by_is_rejected(tmp_path: Path) -> None:
    p = tmp_path / "SPEC.md"
    p.write_text("### R0 (MUST) Something\n\nno citation\n")
    with pytest.raises(SpecError, match=r"rule R0: rule has no 'Checked by:' line"):
        load_rules(p)
