"""Components that own a model or an env and expose a few batch methods (see docs/architecture)."""
