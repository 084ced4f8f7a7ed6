"""The HTML report and the comparison page in a real browser: Debian's Chromium,
headless (``make chromium``, which ``make test`` runs, installs it when missing).

Chromium loads each page from a file with the network mapped to nowhere, and:
``--dump-dom`` gives the DOM it built (the timeline rows and the comparison charts
are there, and no script element, so no script can fail: the pages expand and
collapse with ``<details>``); its console log (``--enable-logging=stderr``) holds no
error; ``--screenshot`` writes a PNG whose pixels hold the timeline's and the
charts' colours, so the SVG really rendered.
"""

from __future__ import annotations

import os
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from llmbridge.profiler.records.records import summarise
from llmbridge.profiler.report.compare import compare_runs, report_dict
from llmbridge.profiler.report.html_report import html_comparison, html_report, timeline_steps
from tests.profiler.report_samples import sample_records, sample_runs

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="Chromium is not installed (make chromium installs Debian's, as make test does)",
)

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Any host the page tried to reach resolves to nothing: the page must need none.
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--enable-logging=stderr",
    "--v=0",
)


def _chromium(tmp: Path, page: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHROMIUM), *_FLAGS, f"--user-data-dir={tmp / 'profile'}", *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
        # No display: headless Chromium needs none; HOME keeps its caches in the test's dir.
        env={**os.environ, "HOME": str(tmp)},
    )


def _console_errors(stderr: str) -> list[str]:
    """Lines of Chromium's log that report the page's console or a script error."""
    return [
        line
        for line in stderr.splitlines()
        if "CONSOLE" in line or "Uncaught" in line or "SyntaxError" in line
    ]


def _pixels(png: bytes) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the set of colours of an 8-bit RGB(A) PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        header = data if kind == b"IHDR" else header
        idat += data if kind == b"IDAT" else b""
        pos += 12 + length
    width, height, depth, colour_type = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour_type in (2, 6), (depth, colour_type)
    channels = 3 if colour_type == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    previous = bytearray(stride)
    unchanged = bytes(stride)
    colours: set[tuple[int, int, int]] = set()
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        if kind == 2 and line == unchanged and y > 0:
            # "Up" with nothing added: the row above again (most rows of a page's
            # background). Its colours are counted; decoding it byte by byte took
            # most of this test's time.
            continue
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        colours.update((line[x], line[x + 1], line[x + 2]) for x in range(0, stride, channels * 2))
        previous = line
    return width, height, colours


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    value = int(hex_colour.lstrip("#"), 16)
    return value >> 16, (value >> 8) & 0xFF, value & 0xFF


def test_the_report_renders_with_its_timeline(tmp_path: Path) -> None:
    records = sample_records()
    page = tmp_path / "report.html"
    page.write_text(html_report(summarise(records), records), "utf-8")
    dump = _chromium(tmp_path, page, "--dump-dom")
    dom = dump.stdout
    assert dom.count('class="timeline"') == len(records)
    expected_rows = sum(len(timeline_steps(r.trace)) for r in records if r.trace)
    assert dom.count('class="tl-row"') == expected_rows
    assert dom.count('class="chart"') == 3
    # No script at all, so none can fail; and the console stayed quiet.
    assert "<script" not in dom
    assert _console_errors(dump.stderr) == []

    shot = tmp_path / "report.png"
    _chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1280,2000")
    width, height, colours = _pixels(shot.read_bytes())
    assert (width, height) == (1280, 2000)
    # The first iteration is open: its model-call and tool-call bars were painted.
    assert _rgb("#4a7ebb") in colours and _rgb("#d9822b") in colours


def test_the_comparison_renders(tmp_path: Path) -> None:
    a, b = sample_runs(tmp_path / "runs")
    page = tmp_path / "comparison.html"
    page.write_text(html_comparison(report_dict(compare_runs([a, b]))), "utf-8")
    dump = _chromium(tmp_path, page, "--dump-dom")
    dom = dump.stdout
    assert 'id="comparison"' in dom
    assert dom.count("interval-chart") == 4  # pass rate, duration, tokens, cost
    assert "not distinguishable at this many iterations" in dom
    assert "<script" not in dom and _console_errors(dump.stderr) == []

    shot = tmp_path / "comparison.png"
    _chromium(tmp_path, page, f"--screenshot={shot}", "--window-size=1280,2000")
    _, _, colours = _pixels(shot.read_bytes())
    # Both kinds of rows were painted: a real difference (green) and one that is not (grey).
    assert _rgb("#1f6f3f") in colours and _rgb("#888888") in colours
