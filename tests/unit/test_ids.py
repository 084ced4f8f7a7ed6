"""``new_id`` (core/ids.py): OS random bytes from a pool, each handed out once, and a
forked child never repeating its parent's."""

from __future__ import annotations

import subprocess
import sys
import threading

from llmbridge.core.ids import _POOL_BYTES, new_id
from tests.waiting import HANG_S


def test_ids_have_their_prefix_and_size_and_never_repeat() -> None:
    ids = [new_id("req_") for _ in range(3 * _POOL_BYTES // 12)]  # several pools' worth
    assert all(i.startswith("req_") and len(i) == 4 + 24 for i in ids)
    assert len(set(ids)) == len(ids)
    assert len(new_id("x-", 5000)) == 2 + 10_000  # over a pool: read on its own


def test_threads_taking_ids_at_once_get_each_their_own() -> None:
    taken: list[list[str]] = [[] for _ in range(8)]
    start = threading.Barrier(8)

    def take(into: list[str]) -> None:
        start.wait()
        into.extend(new_id("t", 7) for _ in range(2000))

    threads = [threading.Thread(target=take, args=(into,)) for into in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [i for into in taken for i in into]
    assert len(set(every)) == len(every) == 16_000


_FORKING = """
import os
from llmbridge.core.ids import new_id
new_id("warm-")  # the parent holds a pool with bytes left
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the child: its next ids, to the parent
    os.write(write, " ".join(new_id("", 12) for _ in range(50)).encode())
    os._exit(0)
os.close(write)
with os.fdopen(read, "rb") as pipe:
    child = pipe.read().decode().split()
os.waitpid(pid, 0)
parent = [new_id("", 12) for _ in range(50)]
print(len(child), len(set(child) & set(parent)))
"""


def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    # In a fresh single-threaded interpreter: forking this one (pytest's, with threads)
    # is what Python 3.12 warns about.
    done = subprocess.run(
        [sys.executable, "-c", _FORKING], capture_output=True, text=True, timeout=HANG_S, check=True
    )
    assert done.stdout.split() == ["50", "0"]  # 50 ids from the child, none the parent's
