"""``bench/profile_summary.py``: samples of waiting threads are no CPU and stay out of
the shares (py-spy records them when native frames are on)."""

from __future__ import annotations

from pathlib import Path

from bench.profile_summary import is_waiting, short, summarise_collapsed

_LOOP = "Runner.run (asyncio/runners.py:118);run_forever (loop.c:1)"
_HELPER = (
    "Thread.run (threading.py:982);_connection_worker_thread "
    "(aiosqlite/core.py:59);_queue_SimpleQueue_get (_queuemodule.c.h:177);"
    "PyThread_acquire_lock_timed (libpython3.11.so.1.0);0x7f6b5c4aed90 (libc.so.6);"
    "0x7f6b5c4a3f16 (libc.so.6)"
)
_WORK = f"{_LOOP};serve_chat (/x/src/llmbridge/gateway/pipeline.py:300)"


def _frames(stack: str) -> list[tuple[str, str]]:
    return [short(frame) for frame in stack.split(";")]


def test_a_thread_asleep_on_a_lock_or_in_epoll_is_waiting() -> None:
    assert is_waiting(_frames(_HELPER))
    assert is_waiting(_frames(f"{_LOOP};uv__io_poll (linux.c:1);epoll_pwait (libc.so.6)"))


def test_running_code_is_not_waiting() -> None:
    assert not is_waiting(_frames(_WORK))
    assert not is_waiting(_frames(f"{_LOOP};write (libc.so.6)"))


def test_waiting_samples_are_left_out_of_the_shares(tmp_path: Path) -> None:
    profile = tmp_path / "stacks.txt"
    profile.write_text(f"{_HELPER} 300\n{_WORK} 100\n")
    summary = summarise_collapsed(profile, top=3)
    assert summary.splitlines()[0].startswith("100 samples")
    assert "300 more of threads waiting" in summary
    assert "100.0%  llmbridge glue" in summary
