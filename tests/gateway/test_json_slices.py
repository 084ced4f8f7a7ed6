"""``loads_in_slices`` is ``orjson.loads``, a slice at a time (no one parse
call may hold the interpreter long while a large body is read).

The properties run with a tiny chunk size so that every array value is sliced."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmbridge.web import json_slices
from llmbridge.web.json_slices import loads_in_slices

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=40,
)
bodies = st.dictionaries(st.text(max_size=8), values, max_size=6)
whitespace = st.sampled_from([b"", b" ", b"\n", b"\t ", b"\r\n  "])


@pytest.fixture(autouse=True)
def tiny_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_slices, "CHUNK_BYTES", 8)


def _spaced(raw: bytes, gaps: list[bytes]) -> bytes:
    """``raw`` with whitespace after some structural bytes outside strings (still the
    same JSON), so the layout is found in text a client formats its own way."""
    out = bytearray()
    in_string = escaped = False
    for index, byte in enumerate(raw):
        out.append(byte)
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:
                escaped = True
            elif byte == 0x22:
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in b"[]{},:":
            out += gaps[index % len(gaps)]
    return bytes(out)


def _outcome(parse: Any, raw: bytes) -> tuple[str, Any]:
    try:
        return ("value", parse(raw))
    except orjson.JSONDecodeError:
        return ("error", None)


# The suite's profile (tests/conftest.py) plus the function-scoped fixture these use.
UNHURRIED = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(
    max_examples=300,
    suppress_health_check=UNHURRIED,
)
@given(body=bodies, gaps=st.lists(whitespace, min_size=1, max_size=4))
def test_a_valid_object_parses_to_what_orjson_gives(
    body: dict[str, Any], gaps: list[bytes]
) -> None:
    raw = _spaced(orjson.dumps(body), gaps)
    assert loads_in_slices(raw) == orjson.loads(raw)


@settings(
    max_examples=400,
    suppress_health_check=UNHURRIED,
)
@given(body=bodies, data=st.data())
def test_damaged_text_fails_exactly_when_orjson_fails(body: dict[str, Any], data: Any) -> None:
    raw = bytearray(orjson.dumps(body))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(raw)))
        if data.draw(st.booleans()) and at < len(raw):
            del raw[at]
        else:
            raw[at:at] = data.draw(
                st.sampled_from([b",", b":", b"[", b"]", b"{", b"}", b'"', b"1"])
            )
    assert _outcome(loads_in_slices, bytes(raw)) == _outcome(orjson.loads, bytes(raw))


@pytest.mark.parametrize(
    "text",
    [
        b'{,"a": 1}',
        b'{"a": 1,}',
        b'{"a": [1, 2] 3}',
        b'{"a": [1] [2]}',
        b'{"a" [1, 2]}',
        b'{"a": 1 "b": 2}',
        b'{"a": [1,, 2]}',
        b'{"a": [1, 2,]}',
        b'{"a": [1, 2]} x',
        b'{"a": [1, 2]}{}',
        b'{"a": [1, 2]',
        b'{"a": "unterminated}',
        b"[1, 2",
        b"{1}",
        b'{"m": [,"a"]}',
        b'{"m": [{}, ]}',
        b"{]",
        b'{"a": [1, 2}}',
        b'{"messages": []]',
        b'{1 "a": 2}',
        b'{"a" 1: 2}',
        b'{"a": \x0c[1, 2]}',
        b'{"a": 1e999}',
    ],
)
def test_malformed_bodies_raise_as_orjson_does(text: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError) as sliced:
        loads_in_slices(text)
    with pytest.raises(orjson.JSONDecodeError) as whole:
        orjson.loads(text)
    assert str(sliced.value) == str(whole.value)


@pytest.mark.parametrize("text", [b"[1, 2]", b'"x"', b"3", b"{}", b" {\n} ", b'{"a": [ ]}'])
def test_other_valid_documents_parse_as_orjson_does(text: bytes) -> None:
    assert loads_in_slices(text) == orjson.loads(text)


def test_a_chat_body_is_parsed_a_chunk_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = orjson.loads

    def counting(raw: bytes | bytearray | str) -> Any:
        calls.append(len(raw))
        return real(raw)

    monkeypatch.setattr(json_slices, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(json_slices.orjson, "loads", counting)
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 100}] * 500, "n": []}
    raw = orjson.dumps(body)
    assert loads_in_slices(raw) == real(raw)
    # Many calls, none of them over the chunk size plus one element and two brackets.
    assert len(calls) > 50
    assert max(calls) <= 1024 + 200
