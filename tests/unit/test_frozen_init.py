"""``core.frozen.faster_frozen_init``: the same ``__init__`` as ``dataclass`` makes for a
frozen slotted class, only cheaper; the class stays frozen."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from llmbridge.core.frozen import faster_frozen_init
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, GenerationParams


def _made() -> Any:
    """A frozen slotted dataclass with every kind of field, made anew each call."""

    @dataclass(frozen=True, slots=True)
    class Made:
        name: str
        count: int = 3
        items: tuple[int, ...] = ()
        table: dict[str, int] = field(default_factory=dict)
        hidden: list[int] = field(default_factory=list, init=False)
        fixed: int = field(default=7, init=False)
        flag: bool = field(default=False, kw_only=True)
        label: str = field(kw_only=True, default_factory=lambda: "made")

    return Made


_Plain = _made()
_Fast = faster_frozen_init(_made())


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class _Checked:
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError("low above high")


def _state(obj: object) -> dict[str, object]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("a",), {}),
        (("a", 5, (1, 2)), {"table": {"x": 1}}),
        (("a",), {"flag": True, "label": "given"}),
        ((), {"name": "b", "count": 0}),
    ],
)
def test_it_builds_what_the_dataclass_init_builds(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    assert _state(_Fast(*args, **kwargs)) == _state(_Plain(*args, **kwargs))


def test_factories_make_a_new_value_each_time() -> None:
    one, two = _Fast("a"), _Fast("a")
    assert one.table == {} and one.table is not two.table and one.hidden is not two.hidden


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), (("a", 1, (), {}, 9), {}), (("a",), {"fixed": 1}), (("a",), {"nope": 1})],
)
def test_it_refuses_what_the_dataclass_init_refuses(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    with pytest.raises(TypeError):
        _Plain(*args, **kwargs)
    with pytest.raises(TypeError):
        _Fast(*args, **kwargs)


def test_the_class_stays_frozen_and_replace_still_works() -> None:
    made = _Fast("a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.name = "b"
    changed = dataclasses.replace(made, count=9)
    assert (changed.name, changed.count, changed.fixed) == ("a", 9, 7)
    assert made == _Fast("a") and hash(_Checked(1, 2)) == hash(_Checked(1, 2))


def test_post_init_runs() -> None:
    assert _Checked(1, 2).high == 2
    with pytest.raises(ValueError, match="low above high"):
        _Checked(3, 2)


def test_only_a_frozen_slotted_dataclass_is_taken() -> None:
    with pytest.raises(TypeError):
        faster_frozen_init(
            dataclass(slots=True)(type("Loose", (), {"__annotations__": {"a": int}}))
        )
    with pytest.raises(TypeError):
        faster_frozen_init(
            dataclass(frozen=True)(type("Dicted", (), {"__annotations__": {"a": int}}))
        )


def test_the_core_types_that_use_it_still_build_the_same() -> None:
    request = ChatRequest(model="m", messages=(Message("user", (TextPart("hi"),)),))
    assert request.params == GenerationParams() and request.tools == () and request.relay is None
    assert dataclasses.replace(request, stream=True).stream is True
    assert ChatRequest.__init__.__qualname__ == "ChatRequest.__init__"
