"""The accelerators census: GPU memory others hold, from nvidia-smi."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("csv_text", "busy"),
    [
        ("0, 0, 143771\n", []),  # an idle H200 (measured)
        ("0, 4, 143771\n1, 1, 143771\n", []),
        ("0, 0, 143771\n1, 81510, 143771\n", ["GPU 1: 81510 MiB used"]),  # a server left on GPU 1
        ("0, [N/A], 143771\n", []),  # MIG or an unsupported query: not read as busy
        ("", []),  # no nvidia-smi (CPU host)
    ],
)
def test_gpu_memory_census_reads_nvidia_smi(csv_text: str, busy: list[str]) -> None:
    from tasks.service.census import busy_gpus

    assert busy_gpus(csv_text) == busy
