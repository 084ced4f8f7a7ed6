"""Google's function call ids carried in the core's call id (dialects/gemini/call_ids.py);
through the gateway with the google-genai client in tests/backends/test_gemini_gateway.py."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from llmbridge.dialects.anthropic.response import anthropic_tool_id
from llmbridge.dialects.gemini.call_ids import is_issued, issued_call_id, recover_call_id

ANTHROPIC_IDS = re.compile(r"^[a-zA-Z0-9_-]+$")


@given(origin=st.text(max_size=20), google_id=st.text(min_size=1, max_size=40))
def test_an_issued_id_comes_back_to_its_backend_whatever_a_front_made_of_it(
    origin: str, google_id: str
) -> None:
    carried = issued_call_id(origin, google_id)
    assert recover_call_id(carried, origin) == google_id
    # Within Anthropic's id alphabet, so the Anthropic front only prefixes it.
    shown = anthropic_tool_id(carried)
    assert ANTHROPIC_IDS.match(shown) and shown == "toolu_" + carried
    assert recover_call_id(shown, origin) == google_id
    assert is_issued(shown)


def test_another_backends_ids_and_ids_of_no_backend_are_not_googles() -> None:
    carried = issued_call_id("gem", "46ww9pp1")
    assert recover_call_id(carried, "other") is None
    assert recover_call_id(carried, None) == "46ww9pp1"
    for call_id in ("call_1", "toolu_01A", "gcall_zz_41", "gcall_676_41", "x_gcall_"):
        assert recover_call_id(call_id, None) is None
        assert not is_issued(call_id)
