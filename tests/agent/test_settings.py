"""Persona settings: validation, the seed's merge order, and what each backend gets
under its own names (fitted by serving/prepare/sampling.py with each backend's real
capabilities, then through the real dialect encoders)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from llmbridge.agent.persona_settings import AgentSettings, generation_params, merge_settings
from llmbridge.backends.anthropic import AnthropicBackend
from llmbridge.backends.base import Capabilities
from llmbridge.backends.embedded.backend import EmbeddedBackend
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, GenerationParams
from llmbridge.dialects.ollama.request import encode_chat_request as encode_ollama
from llmbridge.dialects.openai.request import encode_chat_request as encode_openai
from llmbridge.serving.prepare.sampling import fit_params, repeat_penalty_to_frequency_penalty

OLLAMA = OllamaBackend.capabilities
OPENAI = OpenAICompatBackend.capabilities

# -- repeat_penalty -> frequency_penalty -----------------------------------------------


def test_neutral_maps_to_neutral() -> None:
    assert repeat_penalty_to_frequency_penalty(1.0) == 0.0


@pytest.mark.parametrize(
    ("repeat", "frequency"),
    [(1.1, 0.1906), (1.3, 0.5247), (1.5, 0.8109), (2.0, 1.3863), (0.9, -0.2107)],
)
def test_documented_values(repeat: float, frequency: float) -> None:
    assert repeat_penalty_to_frequency_penalty(repeat) == frequency


def test_clamped_to_the_openai_range() -> None:
    assert repeat_penalty_to_frequency_penalty(math.e) == 2.0
    assert repeat_penalty_to_frequency_penalty(10.0) == 2.0
    assert repeat_penalty_to_frequency_penalty(0.01) == -2.0


def test_reciprocal_penalties_are_opposite() -> None:
    assert repeat_penalty_to_frequency_penalty(1.2) == -repeat_penalty_to_frequency_penalty(1 / 1.2)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_invalid_repeat_penalties_are_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="positive number"):
        repeat_penalty_to_frequency_penalty(bad)


@given(
    st.floats(min_value=1e-6, max_value=1e6, allow_nan=False),
    st.floats(min_value=1e-6, max_value=1e6, allow_nan=False),
)
def test_monotonic_and_bounded(a: float, b: float) -> None:
    low, high = sorted((a, b))
    f_low = repeat_penalty_to_frequency_penalty(low)
    f_high = repeat_penalty_to_frequency_penalty(high)
    assert -2.0 <= f_low <= f_high <= 2.0
    # Above neutral penalises, below encourages, as on the multiplicative side.
    assert (f_high > 0) == (round(2 * math.log(high), 4) > 0)


# -- the settings model and the merge ------------------------------------------------


def test_settings_are_validated() -> None:
    with pytest.raises(ValidationError):
        AgentSettings(temperature=-0.1)
    with pytest.raises(ValidationError):
        AgentSettings(top_p=1.5)
    with pytest.raises(ValidationError):
        AgentSettings(repeat_penalty=0)
    with pytest.raises(ValidationError):
        AgentSettings(frequency_penalty=2.5)
    with pytest.raises(ValidationError):
        AgentSettings.model_validate({"repeatPenalty": 1.1})  # no camelCase aliases


def test_the_accepted_ranges_are_wider_than_the_seeds() -> None:
    # docs/AGENT.md, "Settings": seed 002 bounds temperature to 0.1-1.2, maxTokens to
    # 4,000 and the penalties to 0-2; these are accepted, and why is written there.
    wide = AgentSettings(
        temperature=0.0,
        max_tokens=100_000,
        presence_penalty=-2.0,
        frequency_penalty=-1.5,
        repeat_penalty=10.0,
    )
    assert wide.set_values()["max_tokens"] == 100_000
    assert AgentSettings(temperature=5.0).temperature == 5.0
    for beyond in (
        {"temperature": 5.01},
        {"max_tokens": 0},
        {"presence_penalty": -2.01},
        {"frequency_penalty": 2.01},
        {"repeat_penalty": 10.01},
    ):
        with pytest.raises(ValidationError):
            AgentSettings.model_validate(beyond)


def test_merge_is_persona_first_then_request() -> None:
    persona = AgentSettings(temperature=0.7, max_tokens=2000, repeat_penalty=1.1)
    request = AgentSettings(temperature=0.2, stop=("END",))
    merged = merge_settings(persona, request)
    assert merged == AgentSettings(
        temperature=0.2, max_tokens=2000, repeat_penalty=1.1, stop=("END",)
    )
    # An unset request value never clears the persona's.
    assert merge_settings(persona, AgentSettings()).temperature == 0.7
    assert merge_settings(None, None) == AgentSettings()
    assert merged.set_values() == {
        "temperature": 0.2,
        "max_tokens": 2000,
        "repeat_penalty": 1.1,
        "stop": ["END"],
    }


# -- each backend under its own names ------------------------------------------------

PERSONA = AgentSettings(
    temperature=0.5,
    max_tokens=64,
    top_p=0.9,
    top_k=40,
    repeat_penalty=1.1,
    repeat_last_n=64,
    num_ctx=4096,
    seed=7,
)


def _params(settings: AgentSettings, capabilities: Capabilities) -> GenerationParams:
    return fit_params(generation_params(settings), capabilities)[0]


def _request(settings: AgentSettings, capabilities: Capabilities) -> ChatRequest:
    return ChatRequest(
        model="m",
        messages=(Message("user", (TextPart("hi"),)),),
        params=_params(settings, capabilities),
    )


def test_ollama_gets_repeat_penalty_in_options() -> None:
    body = encode_ollama(_request(PERSONA, OLLAMA))
    assert body["options"] == {
        "num_predict": 64,
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "seed": 7,
        "repeat_penalty": 1.1,
        "num_ctx": 4096,
        "repeat_last_n": 64,
    }
    assert "frequency_penalty" not in body["options"]


def test_openai_gets_the_converted_frequency_penalty() -> None:
    body = encode_openai(_request(PERSONA, OPENAI))
    assert body["frequency_penalty"] == 0.1906
    assert "repeat_penalty" not in body and "presence_penalty" not in body
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (
        0.5,
        0.9,
        64,
        7,
    )


def test_an_explicit_frequency_penalty_wins() -> None:
    settings = merge_settings(PERSONA, AgentSettings(frequency_penalty=0.0))
    assert _params(settings, OPENAI).frequency_penalty == 0.0
    assert _params(settings, OLLAMA).repeat_penalty == 1.1


def test_anthropic_gets_no_penalties_and_others_no_num_ctx() -> None:
    settings = merge_settings(PERSONA, AgentSettings(presence_penalty=0.5))
    params = _params(settings, AnthropicBackend.capabilities)
    assert params.repeat_penalty is None
    assert params.frequency_penalty is None and params.presence_penalty is None
    assert params.top_k == 40 and params.num_ctx is None
    embedded = _params(settings, EmbeddedBackend.capabilities)
    assert embedded.repeat_penalty == 1.1 and embedded.num_ctx is None
    assert embedded.extra == {"repeat_last_n": 64}
