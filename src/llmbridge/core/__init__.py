"""The neutral representation: messages, requests, responses, stream events, errors.

Nothing in here does I/O or knows a dialect's name. Dialects translate to and from
these types; backends produce streams of these events; the gateway renders them.
"""
