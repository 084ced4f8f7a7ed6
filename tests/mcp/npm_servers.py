"""The reference MCP servers from npm that the MCP tests run behind the gateway:
``@modelcontextprotocol/server-everything`` (tools, resources, prompts; over stdio and
streamable HTTP) and ``@modelcontextprotocol/server-filesystem`` (file tools on the
directories it is given), pinned in ``tests/e2e/package.json`` and installed by
``make test`` with the CLIs. They run from the installed package with ``node``, never
``npx -y``: the tests reach no registry.

The check that they are installed fails (never skips): a missing package means the
suite was not set up.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.servers import free_port
from tests.waiting import scaled, wait_until

NODE_MODULES = Path(__file__).resolve().parents[1] / "e2e" / "node_modules"
_PINS: dict[str, str] = json.loads(
    (NODE_MODULES.parent / "package.json").read_text(encoding="utf-8")
)["dependencies"]
EVERYTHING_PACKAGE = "@modelcontextprotocol/server-everything"
FILESYSTEM_PACKAGE = "@modelcontextprotocol/server-filesystem"
EVERYTHING = NODE_MODULES / EVERYTHING_PACKAGE / "dist" / "index.js"
"""server-everything's bin: ``index.js [stdio|sse|streamableHttp]``."""
FILESYSTEM = NODE_MODULES / FILESYSTEM_PACKAGE / "dist" / "index.js"
"""server-filesystem's bin: ``index.js <allowed directory>...``."""
EVERYTHING_DOCS = EVERYTHING.parent / "docs"
"""The files server-everything serves as ``demo://resource/static/document/<name>``."""
SETUP = "Run `make test` (or `make install`), which installs tests/e2e/package-lock.json."


def installed_node() -> str:
    """The ``node`` on ``PATH``, as an absolute path (a stdio server's ``PATH`` is the
    gateway's, but the command stays readable in a failure)."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node is not on PATH: the npm MCP servers cannot run.\n{SETUP}", pytrace=False)
    return node


def check_installed(package: str) -> None:
    """Fail when ``package`` is missing from ``tests/e2e/node_modules`` or is not its pin."""
    manifest = NODE_MODULES / package / "package.json"
    if not manifest.is_file():
        pytest.fail(f"{package} is not installed in {NODE_MODULES}.\n{SETUP}", pytrace=False)
    version = json.loads(manifest.read_text(encoding="utf-8"))["version"]
    if version != _PINS[package]:
        pytest.fail(
            f"{package} is {version}, but tests/e2e/package.json pins {_PINS[package]}.\n{SETUP}",
            pytrace=False,
        )


def everything_stdio(node: str) -> dict[str, object]:
    """An ``mcp.servers`` entry running server-everything over stdio."""
    check_installed(EVERYTHING_PACKAGE)
    return {"command": [node, str(EVERYTHING), "stdio"]}


def filesystem_stdio(node: str, *directories: Path) -> dict[str, object]:
    """An ``mcp.servers`` entry running server-filesystem on ``directories``."""
    check_installed(FILESYSTEM_PACKAGE)
    return {"command": [node, str(FILESYSTEM), *map(str, directories)]}


def _listening(port: int, process: subprocess.Popen[bytes], log: Path) -> bool:
    if process.poll() is not None:
        output = log.read_text(encoding="utf-8", errors="replace")
        raise AssertionError(f"server-everything exited ({process.returncode}):\n{output}")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=scaled(1)):
            return True
    except OSError:
        return False


@contextmanager
def everything_over_http(node: str, log: Path) -> Iterator[str]:
    """server-everything's own streamable HTTP server (``index.js streamableHttp``, on
    the port in ``PORT``) on loopback, its output (a line per request) in ``log``: its
    endpoint's URL, ``…/mcp``. It is stopped (SIGTERM, then SIGKILL) when the block
    ends."""
    check_installed(EVERYTHING_PACKAGE)
    port = free_port()
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PORT": str(port)}
    with log.open("wb") as output:
        process = subprocess.Popen(
            [node, str(EVERYTHING), "streamableHttp"],
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _listening(port, process, log), f"server-everything on port {port}")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
