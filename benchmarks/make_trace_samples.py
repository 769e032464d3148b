"""Write the shipped trace samples (tasks/macro/samples/): generated, not copied from a real trace.

usage: python benchmarks/make_trace_samples.py

40 arrivals over about 20 s (Poisson, 2 a second, seed 5), prompts of 24 to 120 tokens and
replies of 8 to 48, sized for the embedded default's tiny model; the Mooncake sample also gives
each request prefix blocks, a third of them shared with an earlier request's (a system prompt).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tasks" / "macro" / "samples"


def main() -> None:
    rng = random.Random(5)
    now, rows = 0.0, []
    for _ in range(40):
        rows.append((now, rng.randint(24, 120), rng.randint(8, 48)))
        now += rng.expovariate(2.0)
    start = datetime(2023, 11, 16, 18, 15, 46)
    OUT.mkdir(parents=True, exist_ok=True)
    with (OUT / "azure_sample.csv").open("w") as handle:
        handle.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for offset, prompt, reply in rows:
            stamp = start + timedelta(seconds=offset)
            handle.write(f"{stamp:%Y-%m-%d %H:%M:%S}.{stamp.microsecond:06d}0,{prompt},{reply}\n")
    next_block = 100
    with (OUT / "mooncake_sample.jsonl").open("w") as handle:
        for offset, prompt, reply in rows:
            blocks = max(1, prompt // 16)
            shared = [1, 2] if rng.random() < 0.5 else []
            own = list(range(next_block, next_block + blocks - len(shared)))
            next_block += len(own)
            row = {
                "timestamp": round(offset * 1000),
                "input_length": prompt,
                "output_length": reply,
                "hash_ids": shared + own,
            }
            handle.write(json.dumps(row) + "\n")
    print(
        f"wrote {OUT / 'azure_sample.csv'} and {OUT / 'mooncake_sample.jsonl'}: {len(rows)} arrivals over {rows[-1][0]:.1f} s"
    )


if __name__ == "__main__":
    main()
