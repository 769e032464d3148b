"""The campaign's phases: each a task on the engine. Nothing here knows SSH internals."""
