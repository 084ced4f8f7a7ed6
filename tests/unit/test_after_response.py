"""Work left for after a response (web/after_response.py): ``GatewayApp`` runs it once
the request's handling returned, after the response's last message went to the server,
when the handler failed too; each job once, a failing one logged without stopping the
rest; and where nothing collects jobs the caller is told so and runs the work itself."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from llmbridge.gateway.app import GatewayApp
from llmbridge.web.after_response import leave_for_after_response

LOG: list[str] = []


async def replies(request: Request) -> Response:
    assert leave_for_after_response(lambda: LOG.append("first job"))
    assert leave_for_after_response(lambda: LOG.append("second job"))
    return PlainTextResponse("hello")


async def fails_after_leaving(request: Request) -> Response:
    assert leave_for_after_response(lambda: LOG.append("job"))
    raise RuntimeError("the handler's bug")


def _broken() -> None:
    raise ValueError("a job's bug")


async def leaves_a_broken_job(request: Request) -> Response:
    assert leave_for_after_response(_broken)
    assert leave_for_after_response(lambda: LOG.append("job after the broken one"))
    return PlainTextResponse("hello")


APP = GatewayApp(
    routes=[
        Route("/replies", replies, methods=["POST"]),
        Route("/fails", fails_after_leaving, methods=["POST"]),
        Route("/broken", leaves_a_broken_job, methods=["POST"]),
    ]
)


async def _call(path: str) -> None:
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    sent_request = False

    async def receive() -> dict[str, Any]:
        nonlocal sent_request
        if not sent_request:
            sent_request = True
            return {"type": "http.request", "body": b"", "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            LOG.append(f"status {message['status']}")
        elif not message.get("more_body", False):
            LOG.append("last byte sent")

    await APP(scope, receive, send)


@pytest.fixture(autouse=True)
def _clear() -> None:
    LOG.clear()


async def test_jobs_run_in_order_after_the_last_byte_is_sent() -> None:
    await _call("/replies")
    assert LOG == ["status 200", "last byte sent", "first job", "second job"]


async def test_a_job_left_before_the_handler_failed_still_runs() -> None:
    with pytest.raises(RuntimeError, match="the handler's bug"):
        await _call("/fails")
    # Starlette's outermost middleware answered the 500, then re-raised to the server.
    assert LOG == ["status 500", "last byte sent", "job"]


async def test_a_failing_job_is_logged_and_the_rest_run(caplog: pytest.LogCaptureFixture) -> None:
    await _call("/broken")
    assert LOG == ["status 200", "last byte sent", "job after the broken one"]
    failures = [r for r in caplog.records if "work left for after a response failed" in r.message]
    assert len(failures) == 1 and failures[0].exc_info is not None
    assert "a job's bug" in str(failures[0].exc_info[1])


async def test_outside_a_request_nothing_collects_and_the_caller_is_told() -> None:
    assert leave_for_after_response(lambda: LOG.append("never")) is False
    await _call("/replies")  # a request's list does not outlive it
    assert leave_for_after_response(lambda: LOG.append("never")) is False
    assert "never" not in LOG
