"""The text report of ``bench/frontier.py``'s results: the frontier per target and
p99 bound, this tree against the baseline's, every step of the ladder, and the
streaming frame timing.

It reads only the results document ``bench/frontier.py`` writes (also its JSON file),
so a saved run can be rendered again: ``report(orjson.loads(path.read_bytes()))``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BOUNDS_MS", "figure", "report"]

BOUNDS_MS = (5.0, 10.0, 50.0)
"""The p99 bounds (ms) a frontier is reported for, as the field's benchmarks do."""


def figure(value: float | None, spec: str = ".2f") -> str:
    """``value`` formatted, or ``-`` when there is none."""
    return "-" if value is None else format(value, spec)


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def _rate(cell: dict[str, Any], first_rate: float) -> str:
    if cell["rps"] is None:
        return f"< {first_rate:g}"
    text = f"{cell['rps']:,.0f}"
    if not cell["reached"]:
        text = ">= " + text
    return text + (" *" if cell["generator_behind_at_failure"] else "")


def _share(mine: dict[str, Any], base: dict[str, Any]) -> str:
    if mine["rps"] is None or base["rps"] is None:
        return "-"
    text = f"{mine['rps'] / base['rps']:.0%}"
    return text + ("?" if not base["reached"] or not mine["reached"] else "")


def render_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def frontier_table(kind: dict[str, Any], first_rate: float) -> str:
    bounds = [f"{b:g}" for b in BOUNDS_MS]
    rows = [
        ["target"]
        + [f"req/s at p99 <= {b} ms" for b in bounds]
        + [f"share of direct ({' / '.join(bounds)} ms)"]
    ]
    direct = kind["frontier"].get("direct")
    for name, cells in kind["frontier"].items():
        share = "-"
        if direct is not None:
            share = " / ".join(_share(cells[b], direct[b]) for b in bounds)
        rows.append([name, *(_rate(cells[b], first_rate) for b in bounds), share])
    return render_table(rows)


def versus_table(kind: dict[str, Any]) -> str | None:
    """This tree's frontier over the baseline's, when there is one."""
    front = kind["frontier"]
    if "baseline" not in front:
        return None
    rows = [["bound", "llmbridge / baseline"]]
    for b in (f"{x:g}" for x in BOUNDS_MS):
        rows.append([f"p99 <= {b} ms", _share(front["llmbridge"][b], front["baseline"][b])])
    return render_table(rows)


def steps_table(kind: dict[str, Any], stream: bool) -> str:
    rows = [
        [
            "target",
            "offered/s",
            "achieved/s (of scheduled)",
            "errors",
            "p50 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "first byte p99 ms" if stream else "",
            "gen lag p99 ms",
            "gen CPU",
            "server CPU",
        ]
    ]
    for name, steps in kind["steps"].items():
        for s in steps:
            lat = s["latency_ms"]
            first = (s.get("first_byte_ms") or {}).get("p99") if stream else None
            rows.append(
                [
                    name,
                    f"{s['offered_rps']:g}",
                    f"{s['achieved_rps']:.0f} ({s['achieved_share']:.0%})",
                    str(s["errors"]),
                    figure(lat["p50"]),
                    figure(lat["p99"]),
                    figure(lat["p99.9"]),
                    figure(lat["max"], ".1f"),
                    figure(first) if stream else "",
                    figure(s["generator_lag_ms"]["p99"]) + (" *" if s["generator_behind"] else ""),
                    f"{s['generator_cpu_share']:.0%}",
                    _percent(s["server_cpu_share"]),
                ]
            )
    if not stream:
        rows = [row[:8] + row[9:] for row in rows]
    return render_table(rows)


def frames_table(frames: dict[str, Any]) -> str:
    rows = [
        [
            "target",
            "streams ok / errors",
            "content frames per stream",
            "first content frame p50 / p99 ms",
            "gap p50 / p99 / max ms",
            "added to direct: first frame p50, gap p99 ms",
        ]
    ]
    direct = frames.get("direct")
    for name, s in frames.items():
        first, gap = s.get("first_frame_ms") or {}, s.get("frame_gap_ms") or {}
        added = "-"
        if direct is not None and name != "direct" and first and gap:
            d_first, d_gap = direct.get("first_frame_ms") or {}, direct.get("frame_gap_ms") or {}
            if d_first.get("p50") is not None and d_gap.get("p99") is not None:
                added = f"{first['p50'] - d_first['p50']:+.2f}, {gap['p99'] - d_gap['p99']:+.2f}"
        rows.append(
            [
                name,
                f"{s['ok']} / {s['errors']}",
                figure(s.get("frames_per_stream"), ".1f"),
                f"{figure(first.get('p50'))} / {figure(first.get('p99'))}",
                f"{figure(gap.get('p50'))} / {figure(gap.get('p99'))} / {figure(gap.get('max'))}",
                added,
            ]
        )
    return render_table(rows)


def report(document: dict[str, Any]) -> str:
    args = document["settings"]
    first_rate = document["ladder"][0]
    out = []
    titles = {
        "nonstream": f"non-streamed ({args['nonstream_chunks']} pieces per reply)",
        "stream": f"streamed ({args['chunks']} chunks per stream, p99 of the whole stream)",
    }
    for key, kind in document["results"]["kinds"].items():
        out += [f"## Throughput frontier, {titles[key]}", "", frontier_table(kind, first_rate), ""]
        versus = versus_table(kind)
        if versus:
            out += [versus, ""]
        out += [f"### Steps, {key}", "", steps_table(kind, key == "stream"), ""]
    frames = document["results"].get("frames")
    if frames:
        out += [
            f"## Streaming frame timing: {args['frame_rate']:g} streams/s for "
            f"{args['frame_seconds']:g} s, {args['frame_chunks']} chunks "
            f"{args['frame_interval_ms']:g} ms apart",
            "",
            frames_table(frames),
            "",
        ]
    failures = [
        f"- {key} {s['target']} at {s['offered_rps']:g}/s: {s['errors']} failed, e.g. "
        + "; ".join(s["error_examples"])
        for key, kind in document["results"]["kinds"].items()
        for steps in kind["steps"].values()
        for s in steps
        if s["errors"]
    ]
    failures += [
        f"- frame timing {name}: {s['errors']} failed, e.g. " + "; ".join(s["error_examples"])
        for name, s in (frames or {}).items()
        if s["errors"]
    ]
    if failures:
        out += ["Failures (the step fails every bound):", *failures, ""]
    out += [
        "'>=': the ladder ended before the target failed that bound (a lower bound); "
        "'<': even the first rate failed; '*': the load generator was itself behind its "
        "schedule (lag p99 > 1 ms) at the first failing step, so that limit may be the "
        "generator's; '?' on a share: one side is a lower bound.",
    ]
    return "\n".join(out)


# -- main -------------------------------------------------------------------------------------
