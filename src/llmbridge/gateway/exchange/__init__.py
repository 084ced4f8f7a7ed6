"""The per-request bookkeeping: the ``Exchange`` (exchange.py), admission on the key
(admission.py) and the agent's gate (agent_gate.py)."""
