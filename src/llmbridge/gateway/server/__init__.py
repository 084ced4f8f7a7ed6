"""The server mechanics under the gateway's app: how its bytes reach and leave a socket.

- ``asgi``: the app as uvicorn's workers import it (``llmbridge serve --workers N``): the
  run directory handed to the workers, the interpreter tuning and logging each one sets,
  the HTTP protocol they serve with;
- ``read_limits``: the HTTP protocol's limits on reading a request (header size, count
  and time; the body's time), each rejection counted;
- ``head_write``: a response's head held for the write after it, so a small response
  leaves in one ``write()``;
- ``workers``: the workers of one ``llmbridge serve --workers N`` as ``/health`` shows
  them (their status files), and a worker whose supervisor is gone stopping itself.

The routes, the per-request ``Exchange`` and the products sit above, in ``gateway/``.
"""
