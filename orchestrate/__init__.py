"""The `orchestrate` application: the engine (`orchestrator/`) running the phase units
(`tasks/`), over the host transport the config chooses. It is the only place that knows both."""
