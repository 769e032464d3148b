"""The campaign engine: persisted todo state, a dependency-ordered runner, host transports.

Nothing in this package knows about vLLM; the phases live in ``tasks/``.
"""
