"""Where a request goes: a dialect plus a transport, an address and capabilities.

``base.Backend`` is the contract; one module per kind of backend implements it.
"""
