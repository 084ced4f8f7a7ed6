"""``TextTally`` (features/token_count.py): a stream's text counted as its pieces pass
gives what ``count_text_tokens`` gives the text joined, however it is cut, without
keeping the text."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmbridge.features.token_count import TextTally, count_text_tokens

# Words, spaces, tabs, newlines and a non-ASCII space, so cuts fall everywhere.
PIECES = st.lists(st.text(alphabet="ab cdé\t\n\u3000xyz", max_size=12), max_size=30)


@given(PIECES, st.sets(st.integers(min_value=0, max_value=30)))
def test_the_tally_of_the_pieces_is_the_count_of_the_text(
    pieces: list[str], read_after: set[int]
) -> None:
    """Whatever the pieces, and whenever the count is read on the way (each read
    counts what is held)."""
    tally = TextTally()
    for index, piece in enumerate(pieces):
        tally.add(piece)
        if index in read_after:
            assert tally.tokens == count_text_tokens("".join(pieces[: index + 1]))
    assert tally.tokens == count_text_tokens("".join(pieces))
    assert tally.pieces == len(pieces)


def test_what_is_held_uncounted_stays_bounded() -> None:
    tally = TextTally()
    for _ in range(100_000):
        tally.add("word ")
    assert tally._pending_chars < TextTally.PENDING_CHARS  # counted a batch at a time
    assert tally.tokens == 100_000


def test_a_word_cut_across_pieces_is_one_word() -> None:
    tally = TextTally()
    for piece in ("inter", "nation", "alisation", " is", " long"):
        tally.add(piece)
    assert tally.tokens == count_text_tokens("internationalisation is long") == 7


def test_a_long_run_without_spaces_keeps_only_its_length() -> None:
    tally = TextTally()
    for _ in range(10_000):
        tally.add('{"k":1}')  # tool arguments stream without whitespace
    assert tally.tokens == (7 * 10_000 + 3) // 4
