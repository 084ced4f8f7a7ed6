"""The last words of tool-call emulation: a short apology in the user's language.

Seed 000's final fallback (``getFallbackChatResponse``) gives the user a sentence in
their own language instead of an error when the model produced nothing usable: a
Home Assistant voice user hears "sorry, try again", not a failed request. This module
owns picking that language and the sentence.

The language is read from the user's words, deterministically, with no model call:

- by script first: Hangul is Korean; hiragana or katakana is Japanese (Japanese also
  writes Chinese characters); other Chinese characters are Chinese, simplified when
  one of a few characters that only simplified Chinese writes appears, traditional
  otherwise (seed 000's examples are traditional: 開客廳的燈);
- then, for Latin script, by common words: the most matches among French, German,
  Spanish and English wins, English on a tie;
- English when nothing matches (or there are no words).

The table covers the languages of seed 000's examples (English, Chinese) and a few
that Home Assistant users commonly speak; adding one is a word set and a sentence.
"""

from __future__ import annotations

import re

__all__ = ["APOLOGIES", "apology", "detect_language"]

APOLOGIES: dict[str, str] = {
    "en": "Sorry, I could not come up with an answer just now. Please try again.",
    "zh-Hant": "抱歉，我現在無法回答，請再試一次。",
    "zh-Hans": "抱歉，我现在无法回答，请再试一次。",
    "ja": "申し訳ありません。今はお答えできません。もう一度お試しください。",
    "ko": "죄송합니다. 지금은 답변을 드릴 수 없습니다. 다시 시도해 주세요.",
    "fr": "Désolé, je n'ai pas pu répondre pour le moment. Veuillez réessayer.",
    "de": "Entschuldigung, ich konnte gerade keine Antwort finden. Bitte versuche es noch einmal.",
    "es": "Lo siento, no he podido responder en este momento. Inténtalo de nuevo.",
}
"""The apology per language tag; ``en`` is the default."""

_HANGUL = re.compile(r"[\uac00-\ud7af\u1100-\u11ff\u3130-\u318f]")
_KANA = re.compile(r"[\u3040-\u30ff]")
_HAN = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")
_SIMPLIFIED_ONLY = frozenset("这们么个为说时气开灯吗现请问还没几关门厅电视温设让")
"""Characters simplified Chinese writes where traditional writes another
(這們麼個為說時氣開燈嗎現請問還沒幾關門廳電視溫設讓)."""


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_COMMON_WORDS: dict[str, frozenset[str]] = {
    "en": _words(
        "the is are and what how where when who why please turn on off light hello hi thanks "
        "can you my it this that weather"
    ),
    "fr": _words(
        "le la les est et je tu vous bonjour salut merci quel quelle quels comment pourquoi "
        "allume éteins lumière il fait du des une pas pour dans avec ça où qui"
    ),
    "de": _words(
        "der die das ist und ich du sie wie was wo wer hallo danke nicht ein eine mit für auf "
        "bitte wetter heute geht schalte licht mach aus an"
    ),
    "es": _words(
        "el los las es y yo tú usted hola gracias qué cómo dónde cuál un una por para con del "
        "está hace tiempo enciende apaga luz hoy"
    ),
}
_WORD = re.compile(r"\w+")


def detect_language(text: str) -> str:
    """The language tag (a key of ``APOLOGIES``) of ``text`` (module docstring)."""
    if _HANGUL.search(text):
        return "ko"
    if _KANA.search(text):
        return "ja"
    if _HAN.search(text):
        return "zh-Hans" if any(char in _SIMPLIFIED_ONLY for char in text) else "zh-Hant"
    words = _WORD.findall(text.lower())
    scores = {lang: sum(w in common for w in words) for lang, common in _COMMON_WORDS.items()}
    best = max(scores.values(), default=0)
    if best == 0 or scores["en"] == best:
        return "en"
    return next(lang for lang, score in scores.items() if score == best)


def apology(user_text: str) -> str:
    """The apology in the language of ``user_text`` (the user's last message)."""
    return APOLOGIES[detect_language(user_text)]
