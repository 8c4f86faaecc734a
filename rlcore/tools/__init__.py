"""Tools a model calls in a multi-turn rollout (docs/agents.md): the plug-in protocol and its
checks (``protocol.py``), the built-ins (``calculator.py``, ``python.py`` with its bubblewrap
sandbox ``sandbox.py``), the call parser (``calls.py``) and the process pool that runs calls under
a deadline (``pool.py``)."""
