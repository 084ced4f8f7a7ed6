"""Latency against concurrency, one line per target, from ``bench/compare.py``'s results.

This file owns the picture only: two panels (non-streaming, streaming), concurrency
on the x axis, latency (p50 solid, p99 dashed) on a log y axis, a colour per target.

- ``OUT.png``: drawn with matplotlib, which is not an llmbridge dependency; it is
  installed in the LiteLLM virtualenv (``bench/requirements-litellm.txt``), so
  ``compare.py`` runs this file with that venv's python.
- ``OUT.svg``: written by hand with the standard library only, for any python.

Run: ``bench/.venv-litellm/bin/python bench/compare_plot.py RESULTS.json OUT.png``
(or ``.venv/bin/python bench/compare_plot.py RESULTS.json OUT.svg``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

__all__ = ["Series", "series", "write_png", "write_svg"]

COLOURS = {
    "direct": "#7f7f7f",
    "llmbridge-openai": "#1f77b4",
    "llmbridge-ollama": "#2ca02c",
    "llmbridge-anthropic": "#9467bd",
    "litellm": "#d62728",
    "portkey": "#ff7f0e",
}
PANELS = ((False, "non-streaming"), (True, "streaming"))

# (concurrency, p50 ms, p99 ms), by target, by panel (stream or not).
Series = dict[bool, dict[str, list[tuple[int, float, float]]]]


def series(document: dict[str, Any]) -> Series:
    out: Series = {False: {}, True: {}}
    for cell in document["cells"]:
        for name, summary in cell["targets"].items():
            latency = summary["latency_ms"]
            if summary["requests_ok"] and latency["p50"] == latency["p50"]:
                out[bool(cell["stream"])].setdefault(name, []).append(
                    (int(cell["concurrency"]), float(latency["p50"]), float(latency["p99"]))
                )
    for panel in out.values():
        for points in panel.values():
            points.sort()
    return out


def _title(document: dict[str, Any]) -> str:
    s = document.get("settings", {})
    return (
        f"Latency vs concurrency: llmbridge, LiteLLM {document.get('litellm_version') or '?'}, "
        f"Portkey {document.get('portkey_version') or '-'} "
        f"and the backend alone ({s.get('chunks', '?')}-chunk streams, "
        f"{s.get('nonstream_chunks', '?')}-piece replies)"
    )


def write_png(document: dict[str, Any], out: Path) -> None:
    import matplotlib  # type: ignore[import-not-found, unused-ignore]

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # type: ignore[import-not-found, unused-ignore]
    from matplotlib.ticker import FuncFormatter  # type: ignore[import-not-found, unused-ignore]

    data = series(document)
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2), sharey=True)
    for ax, (stream, label) in zip(axes, PANELS, strict=True):
        for name, points in data[stream].items():
            xs = [p[0] for p in points]
            colour = COLOURS.get(name, "black")
            ax.plot(xs, [p[1] for p in points], "-o", color=colour, label=f"{name} p50")
            ax.plot(xs, [p[2] for p in points], "--", color=colour, alpha=0.7, label=f"{name} p99")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ticks = sorted({p[0] for pts in data[stream].values() for p in pts})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("requests in flight (concurrency)")
        ax.set_title(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("latency, ms (whole reply or whole stream; log scale)")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=5, fontsize=8, frameon=False)
    fig.suptitle(_title(document), fontsize=10)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _nice_decades(low: float, high: float) -> list[float]:
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    return [10.0**e for e in range(first, last + 1)]


def write_svg(document: dict[str, Any], out: Path) -> None:
    """The same chart as ``write_png``, as a self-contained SVG (no dependency)."""
    data = series(document)
    values = [v for panel in data.values() for pts in panel.values() for p in pts for v in p[1:]]
    decades = _nice_decades(min(values), max(values)) if values else [0.1, 1.0]
    y_low, y_high = math.log10(decades[0]), math.log10(decades[-1])
    width, height, panel_w, top, plot_h, left = 1100, 520, 470, 50, 330, 80
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="14">'
        f"{escape(_title(document))}</text>",
    ]
    for index, (stream, label) in enumerate(PANELS):
        x0 = left + index * (panel_w + 70)
        ticks = sorted({p[0] for pts in data[stream].values() for p in pts}) or [1]
        c_low, c_high = math.log2(ticks[0]), math.log2(ticks[-1])

        def px(c: float, x0: int = x0, c_low: float = c_low, c_high: float = c_high) -> float:
            span = (c_high - c_low) or 1.0
            return x0 + 20 + (math.log2(c) - c_low) / span * (panel_w - 40)

        def py(ms: float) -> float:
            return top + plot_h - (math.log10(ms) - y_low) / (y_high - y_low) * plot_h

        parts.append(
            f'<rect x="{x0}" y="{top}" width="{panel_w}" height="{plot_h}" '
            f'fill="none" stroke="#444"/>'
        )
        parts.append(
            f'<text x="{x0 + panel_w / 2}" y="{top - 8}" text-anchor="middle">{label}</text>'
        )
        for decade in decades:
            y = py(decade)
            parts.append(
                f'<line x1="{x0}" x2="{x0 + panel_w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
            )
            parts.append(
                f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{decade:g} ms</text>'
            )
        for c in ticks:
            x = px(c)
            parts.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{top + plot_h}" stroke="#eee"/>'
            )
            parts.append(
                f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle">{c}</text>'
            )
        parts.append(
            f'<text x="{x0 + panel_w / 2}" y="{top + plot_h + 34}" text-anchor="middle">'
            "requests in flight (concurrency)</text>"
        )
        for name, points in data[stream].items():
            colour = COLOURS.get(name, "black")
            for column, dash in ((1, ""), (2, ' stroke-dasharray="6 4"')):
                path = " ".join(f"{px(p[0]):.1f},{py(p[column]):.1f}" for p in points)
                parts.append(
                    f'<polyline points="{path}" fill="none" stroke="{colour}" '
                    f'stroke-width="2"{dash}/>'
                )
            for p in points:
                parts.append(
                    f'<circle cx="{px(p[0]):.1f}" cy="{py(p[1]):.1f}" r="3" fill="{colour}"/>'
                )
    legend_y = top + plot_h + 60
    for index, name in enumerate(COLOURS):
        x = left + index * 200
        parts.append(
            f'<line x1="{x}" x2="{x + 30}" y1="{legend_y}" y2="{legend_y}" '
            f'stroke="{COLOURS[name]}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{x + 36}" y="{legend_y + 4}">{name}</text>')
    parts.append(
        f'<text x="{left}" y="{legend_y + 30}">solid with dots: p50; dashed: p99. Latency is '
        "the whole reply, or the whole stream; log scale.</text>"
    )
    parts.append("</svg>")
    out.write_text("\n".join(parts) + "\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="a JSON file written by bench/compare.py")
    parser.add_argument("out", type=Path, help="OUT.png (needs matplotlib) or OUT.svg")
    args = parser.parse_args(argv)
    document = json.loads(args.results.read_text())
    if args.out.suffix.lower() == ".png":
        write_png(document, args.out)
    else:
        write_svg(document, args.out)
    print(args.out)


if __name__ == "__main__":
    main()
