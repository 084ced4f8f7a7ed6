"""Hybrid memory (seed 002): a session's history as context within a token
budget, and the background work that feeds it.

- ``context``: ``MemoryBuilder`` and ``assemble_history``, the history within the
  budget without gaps (pins, facts, the long-range summary, summaries, older and
  recent messages), and the seed's labels;
- ``summariser``: ``Summariser``, the background model work: summaries of older
  messages, their compaction into a rolling long-range summary, fact extraction;
- ``facts``: the statements offered to the fact extractor and its JSON schema.
"""

from llmbridge.agent.memory.context import (
    FACTS_PREFIX,
    FACTS_SUFFIX,
    FALLBACK_MESSAGES,
    HISTORY_INSTRUCTION,
    OLDER_PREFIX,
    OLDER_SUFFIX,
    PINS_PREFIX,
    PINS_SUFFIX,
    RECENT_PREFIX,
    RECENT_SEPARATOR,
    RECENT_SUFFIX,
    SUMMARIES_PREFIX,
    SUMMARIES_SUFFIX,
    MemoryBuilder,
    MemoryConfig,
    MemoryContext,
    assemble_history,
    truncate_to_tokens,
)
from llmbridge.agent.memory.facts import FACTS_SYSTEM_PROMPT
from llmbridge.agent.memory.summariser import (
    COMPACTION_SYSTEM_PROMPT,
    SUMMARY_SYSTEM_PROMPT,
    MemoryUsage,
    Summariser,
    SummariserConfig,
)

__all__ = [
    "COMPACTION_SYSTEM_PROMPT",
    "FACTS_PREFIX",
    "FACTS_SUFFIX",
    "FACTS_SYSTEM_PROMPT",
    "FALLBACK_MESSAGES",
    "HISTORY_INSTRUCTION",
    "OLDER_PREFIX",
    "OLDER_SUFFIX",
    "PINS_PREFIX",
    "PINS_SUFFIX",
    "RECENT_PREFIX",
    "RECENT_SEPARATOR",
    "RECENT_SUFFIX",
    "SUMMARIES_PREFIX",
    "SUMMARIES_SUFFIX",
    "SUMMARY_SYSTEM_PROMPT",
    "MemoryBuilder",
    "MemoryConfig",
    "MemoryContext",
    "MemoryUsage",
    "Summariser",
    "SummariserConfig",
    "assemble_history",
    "truncate_to_tokens",
]
