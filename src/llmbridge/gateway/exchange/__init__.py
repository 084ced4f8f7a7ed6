"""The per-request bookkeeping: ONE ``Exchange`` per request, admit -> watch -> record.

Every route that serves the model API (every dialect's chats, completions, token counts,
embeddings, model lists and lookups, stored responses, and the agent API's turns) goes
through one ``Exchange``, so a request cannot be served without being admitted and
recorded (four objects used to watch the same stream, each finished by hand on up to
four exit paths, and requests slipped past them). Its modules, lowest first:

- ``admission``: what a request's key may do: its record in the scope, the models its
  globs allow, a call's worst-case cost (the budget's reservation), a refusal's headers;
- ``meter``: ``ReplyMeter``, what the reply said, noted as its events pass once
  (``Exchange.watch`` for a stream, ``Exchange.collect`` for a reply sent whole): usage,
  the text generated, why it ended, the failure; a dropped stream's bill;
- ``record``: what a finished request leaves behind: its usage-ledger row, its
  Prometheus metrics, its span;
- ``exchange``: the ``Exchange`` itself: admission on the key, the backend that served,
  the time to the first event, settling the key once, however the request ends; its
  fields are written only through its methods;
- ``handler``: ``exchanged``, which makes a route handler of a function of the request
  and its ``Exchange`` and marks it, so a test proves no route is left out;
- ``agent_gate``: the agent API's requests admitted and recorded the same way (the hook
  ``agent/gate.py`` names, filled here: the agent may not import the gateway).
- ``mcp_gate``: the MCP gateway's tool calls admitted (the key's ``rpm`` and parallel
  slot) and recorded (a ledger row, metrics, a span) without an ``Exchange``: the hook
  ``mcp/gate.py`` names, filled here.

The instruments the record writes into are the gateway's: the metrics registry
(gateway/metrics.py), the tracer (gateway/telemetry.py), the ledger it opens
(gateway/accounting.py). docs/ARCHITECTURE.md, "The Exchange", is the contract.
"""
