"""The report's iteration list, filtered and sorted in the page, and each iteration's
tool calls beside another's.

The page stays one file with no script: the controls are radio buttons placed before
the list, and CSS reads them (``#show-failed:checked ~ .iterations``). Filtering hides
iterations by their classes (``passed``, ``failed``, ``has-findings``); sorting sets the
CSS ``order`` of each iteration from the rank it carries for each key (``--by-duration``
...), so the list is written once, in the run's order. The radio buttons are visually
hidden but take the keyboard's focus (arrow keys move within a group), and their
labels show the focus.

Side by side: within a group (provider, scenario, model, mode) each iteration's tool
calls are aligned with those of the group's reference iteration (its first that passed,
else its first; the reference is set against the next one) by ``difflib``'s longest
matching blocks over (tool, arguments); each row is marked the same, changed, or only
on one side.
"""

from __future__ import annotations

import difflib
import html
import json
from collections.abc import Callable, Sequence

from llmbridge.profiler.records.records import IterationRecord

__all__ = ["ITERATIONS_CSS", "Render", "iterations_section", "side_by_side"]

_SHOW = (("all", "all"), ("failed", "failed"), ("passed", "passed"), ("findings", "with findings"))
_SORT = (
    ("run", "run order"),
    ("outcome", "failed first"),
    ("duration", "longest first"),
    ("cost", "costliest first"),
    ("findings", "most findings first"),
)

ITERATIONS_CSS = (
    ".ctl{position:absolute;opacity:0;width:1px;height:1px;margin:0}"
    ".controls{display:flex;flex-wrap:wrap;gap:.3rem .8rem;align-items:center;margin:.5rem 0;"
    "font-size:.9rem}.controls label{border:1px solid #bbb;border-radius:1rem;padding:.1rem .6rem;"
    "cursor:pointer}.iterations{display:flex;flex-direction:column}"
    "#show-failed:checked~.iterations>.iteration.passed,"
    "#show-passed:checked~.iterations>.iteration.failed,"
    "#show-findings:checked~.iterations>.iteration:not(.has-findings){display:none}"
    + "".join(
        f"#sort-{key}:checked~.iterations>.iteration{{order:var(--by-{key})}}"
        for key, _ in _SORT[1:]
    )
    + "".join(
        f"#{group}-{key}:checked~.controls label[for={group}-{key}]"
        "{background:#1f4e8c;color:#fff;border-color:#1f4e8c}"
        f"#{group}-{key}:focus-visible~.controls label[for={group}-{key}]"
        "{outline:2px solid #d9822b;outline-offset:2px}"
        for group, keys in (("show", _SHOW), ("sort", _SORT))
        for key, _ in keys
    )
    + ".sbs{font-size:.82rem}.sbs td{text-align:left}.sbs .same{color:#555}"
    ".sbs .changed{background:#fff4d6}.sbs .only{background:#fde2e2}"
)


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _ranks(
    records: Sequence[IterationRecord], key: Callable[[IterationRecord], float]
) -> list[int]:
    """Each record's place when sorted by ``key``, largest first (ties in run order)."""
    order = sorted(range(len(records)), key=lambda i: (-key(records[i]), i))
    ranks = [0] * len(records)
    for rank, index in enumerate(order):
        ranks[index] = rank
    return ranks


def _duration(record: IterationRecord) -> float:
    return sum(p.metrics.timing.total_ms for p in record.prompts)


def _cost(record: IterationRecord) -> float:
    return sum(p.metrics.cost.total_usd for p in record.prompts)


def _calls(record: IterationRecord) -> list[tuple[str, str, bool]]:
    """The iteration's tool calls in order: (tool, arguments as text, failed)."""
    events = (record.trace or {}).get("events") or []
    failed = {e.get("call_id") for e in events if e.get("type") == "error" and e.get("call_id")}
    return [
        (
            str(e.get("tool") or "?"),
            json.dumps(e.get("arguments"), sort_keys=True, default=str),
            e.get("call_id") in failed,
        )
        for e in events
        if e.get("type") == "tool_call"
    ]


def _call_cell(call: tuple[str, str, bool] | None) -> str:
    if call is None:
        return "<td></td>"
    tool, arguments, failed = call
    shown = arguments if len(arguments) <= 120 else arguments[:119] + "…"
    mark = ' <span class="fail">failed</span>' if failed else ""
    return f"<td><code>{_esc(tool)}</code> {_esc(shown)}{mark}</td>"


def side_by_side(left: IterationRecord, right: IterationRecord) -> str:
    """``left``'s and ``right``'s tool calls aligned, one row per position: ``same``,
    ``changed`` (a different call in the same place) or ``only`` on one side."""
    a, b = _calls(left), _calls(right)
    matcher = difflib.SequenceMatcher(a=[c[:2] for c in a], b=[c[:2] for c in b], autojunk=False)
    rows = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        span = max(i2 - i1, j2 - j1)
        for k in range(span):
            one = a[i1 + k] if i1 + k < i2 else None
            two = b[j1 + k] if j1 + k < j2 else None
            mark = "same" if tag == "equal" else "changed" if one and two else "only"
            rows.append(
                f'<tr class="{mark}"><td>{mark}</td>{_call_cell(one)}{_call_cell(two)}</tr>'
            )
    if not rows:
        return '<p class="note">Neither iteration called a tool.</p>'
    return (
        '<table class="sbs"><tr><th></th>'
        f"<th>#{left.iteration}</th><th>#{right.iteration}</th></tr>" + "".join(rows) + "</table>"
    )


def _references(records: Sequence[IterationRecord]) -> dict[int, int]:
    """Each record's index -> the index of the record it is set beside (module docstring)."""
    groups: dict[tuple[str, str, str, str], list[int]] = {}
    for index, r in enumerate(records):
        groups.setdefault((r.provider, r.scenario, r.model, r.mode), []).append(index)
    beside: dict[int, int] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        reference = next((i for i in members if records[i].passed), members[0])
        others = [i for i in members if i != reference]
        beside[reference] = others[0]
        beside.update({i: reference for i in others})
    return beside


Render = Callable[[IterationRecord, bool, str, str], str]
"""``render(record, opened, style, beside)``: one iteration's element (html_report.py),
with ``style`` as its style attribute's value and ``beside`` inside it."""


def iterations_section(records: Sequence[IterationRecord], render: Render) -> str:
    """The controls, then the list of iterations drawn by ``render``."""
    controls = []
    inputs = []
    for group, keys, title in (("show", _SHOW, "Show"), ("sort", _SORT, "Sort")):
        controls.append(f"<span>{title}:</span>")
        for n, (key, label) in enumerate(keys):
            checked = " checked" if n == 0 else ""
            inputs.append(
                f'<input type="radio" class="ctl" name="{group}" id="{group}-{key}"{checked}>'
            )
            controls.append(f'<label for="{group}-{key}">{_esc(label)}</label>')
    ranks = {
        "outcome": _ranks(records, lambda r: 0.0 if r.passed else 1.0),
        "duration": _ranks(records, _duration),
        "cost": _ranks(records, _cost),
        "findings": _ranks(records, lambda r: float(len(r.findings))),
    }
    beside = _references(records)
    items = []
    for index, record in enumerate(records):
        style = ";".join(f"--by-{key}:{ranks[key][index]}" for key in ranks)
        extra = ""
        if index in beside:
            other = records[beside[index]]
            extra = (
                f'<details class="beside"><summary>tool calls beside #{other.iteration}'
                f"</summary>{side_by_side(record, other)}</details>"
            )
        items.append(render(record, index == 0, style, extra))
    return (
        "".join(inputs)
        + f'<div class="controls">{"".join(controls)}</div>'
        + f'<div class="iterations">{"".join(items)}</div>'
    )
