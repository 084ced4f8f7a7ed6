"""Accounts: API keys kept in the database with their limits, the usage
ledger and the price table. The gateway and the CLI use it.

``keys`` (``KeyStore``: keys stored as SHA-256 hashes, ``KeyRecord``, the per-process
cache), ``limits`` (``admit``: a key's models, budget, parallel requests, requests and
tokens per minute, counted atomically in the shared state; the rate-limit headers),
``service`` (``Accounts``: what a gateway holds, and how a request's key is resolved),
``routes`` (the ``/admin/`` HTTP API, behind the master key), ``prices`` (the
``prices:`` table, the cost of a reply's usage), ``ledger`` (one ``usage`` row per
request, written in batches off the request path), ``usage`` (the ledger's report,
grouped by key, model or day).
"""
