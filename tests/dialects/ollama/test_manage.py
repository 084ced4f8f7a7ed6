"""Model-management bodies (``/api/pull``, ``/api/push``, ``/api/delete``, ``/api/copy``,
``/api/create``) and ``keep_alive`` as Ollama reads them: decoded, validated, and
re-addressed to a backend's names with every other field as the client sent it."""

from __future__ import annotations

from typing import Any

import pytest

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.model_info import ModelOperation
from llmbridge.dialects.ollama import decode_model_request
from llmbridge.dialects.ollama.types import keep_alive_seconds


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (0.0, 0.0),
        ("0", 0.0),
        ("0s", 0.0),
        ("0m", 0.0),
        ("0h0m0s", 0.0),
        (300, 300.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("-1", None),  # a string needs a unit, a negative one too
        ("-1m", -60.0),
        (-1, -1.0),
        (None, None),
        ("", None),
        ("soon", None),
        ("5", None),  # Go's ParseDuration wants a unit on anything but 0
        ("5m soon", None),
    ],
)
def test_keep_alive_in_seconds(value: str | int | float | None, seconds: float | None) -> None:
    assert keep_alive_seconds(value) == seconds


def test_pull_by_the_deprecated_name_is_sent_as_model() -> None:
    body = {"name": "coder", "stream": False, "insecure": True, "username": "x"}
    request = decode_model_request("pull", body)
    assert (request.model, request.other, request.streamed) == ("coder", None, False)
    assert request.for_backend("qwen3-coder:30b", None) == {
        "model": "qwen3-coder:30b",
        "stream": False,
        "insecure": True,
        "username": "x",
    }
    assert body == {"name": "coder", "stream": False, "insecure": True, "username": "x"}


@pytest.mark.parametrize(
    ("operation", "body", "streamed"),
    [
        ("pull", {"model": "m"}, True),
        ("push", {"model": "m", "stream": True}, True),
        ("create", {"model": "m", "from": "base"}, True),
        ("create", {"model": "m", "stream": False}, False),
        ("delete", {"model": "m"}, False),
        ("copy", {"source": "m", "destination": "n"}, False),
    ],
)
def test_which_replies_are_progress_lines(
    operation: ModelOperation, body: dict[str, Any], streamed: bool
) -> None:
    assert decode_model_request(operation, body).streamed is streamed


def test_create_and_copy_rename_both_models() -> None:
    create = decode_model_request(
        "create", {"model": "terse", "from": "coder", "system": "Be terse.", "files": {}}
    )
    assert (create.model, create.other) == ("terse", "coder")
    assert create.for_backend("terse", "qwen3-coder:30b") == {
        "model": "terse",
        "from": "qwen3-coder:30b",
        "system": "Be terse.",
        "files": {},
    }
    copy = decode_model_request("copy", {"source": "coder", "destination": "backup"})
    assert (copy.model, copy.other) == ("coder", "backup")
    assert copy.for_backend("qwen3-coder:30b", "backup") == {
        "source": "qwen3-coder:30b",
        "destination": "backup",
    }


@pytest.mark.parametrize(
    ("operation", "body", "message"),
    [
        ("pull", {}, "model is required"),
        ("delete", {"name": ""}, "model is required"),
        ("pull", {"model": 3}, "model"),
        ("pull", {"model": "m", "stream": "yes"}, "stream"),
        ("push", {"model": "m", "insecure": 1}, "insecure"),
        ("copy", {"source": "m"}, "destination"),
        ("copy", {"source": "", "destination": "n"}, "source"),
        ("create", {"model": "m", "from": 7}, "from"),
        ("delete", [], ""),
    ],
)
def test_bad_bodies_name_the_field(operation: ModelOperation, body: object, message: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_model_request(operation, body)
    assert caught.value.message.startswith(message)
    assert caught.value.status_code == 400
