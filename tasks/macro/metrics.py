"""Serving metrics from per-request records, with vLLM's definitions (`vllm bench serve`).

- TTFT: time to the first streamed chunk carrying `choices`.
- TPOT: (E2E - TTFT) / (output tokens - 1), for requests with more than one output token.
- ITL: every gap between consecutive streamed chunks, pooled over requests.
- E2E: request sent to the last streamed chunk carrying choices (vLLM's `latency`; the usage
  chunk and `[DONE]` after it are not counted).
- Delivery stalls: gaps between chunks far above the run's typical gap (see STALL_*). They are
  counted in every figure above, as a user feels them; they are listed because vLLM's /metrics
  histograms are stamped in the engine and never see a stall in the API server or the host.
- Output tokens: `usage.completion_tokens`. Output throughput: output tokens / run duration.
Percentiles interpolate linearly between order statistics (numpy's default, as vLLM uses).
"""

from __future__ import annotations

import math
from typing import Any

from tasks.macro.energy import telemetry_of

DEFINITIONS = {
    "ttft": "time from sending the request to the first streamed chunk carrying choices",
    "tpot": "(E2E - TTFT) / (output tokens - 1), requests with > 1 output token",
    "itl": "gaps between consecutive streamed chunks, pooled over requests",
    "e2e": "request sent to the last streamed chunk carrying choices",
    "output_throughput": "sum of usage.completion_tokens / benchmark duration",
    "server_view": "delta of vLLM's /metrics histograms (sum/count) over the run",
    "stalls": "gaps between chunks above max(50 ms, 10 x the run's ITL p50); included in every figure",
    "prefix_cache": "vllm:prefix_cache_hits / vllm:prefix_cache_queries (prompt tokens) over the run, /metrics",
}

# A gap this far above the typical one is not decode pace: it is the API server or the host not
# delivering (scheduling, GC, a starved core). 50 ms keeps jittery fast servers from counting.
STALL_MIN_S = 0.050
STALL_TIMES_P50 = 10


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return math.nan
    position = (len(sorted_values) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def distribution_ms(values_s: list[float]) -> dict[str, float | int]:
    ordered = sorted(v * 1000 for v in values_s)
    if not ordered:
        return {"count": 0}
    return {
        "count": len(ordered),
        "mean": sum(ordered) / len(ordered),
        "p50": percentile(ordered, 0.5),
        "p90": percentile(ordered, 0.9),
        "p99": percentile(ordered, 0.99),
    }


def tpot_s(record: dict[str, Any]) -> float | None:
    tokens = record.get("output_tokens") or 0
    if record.get("error") or tokens <= 1 or record.get("ttft_s") is None:
        return None
    return (record["e2e_s"] - record["ttft_s"]) / (tokens - 1)


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    records = run["requests"]
    ok = [r for r in records if not r.get("error") and r.get("ttft_s") is not None]
    failures = [r["error"] for r in records if r.get("error")]
    tpots = [t for r in ok if (t := tpot_s(r)) is not None]
    output_tokens = sum(r.get("output_tokens") or 0 for r in ok)
    duration = run["duration_s"]
    summary: dict[str, Any] = {
        "concurrency": run["concurrency"],
        "requests": len(records),
        "completed": len(ok),
        "failed": len(failures),
        "failure_examples": failures[:3],
        "duration_s": duration,
        "request_throughput_per_s": len(ok) / duration if duration else math.nan,
        "output_throughput_tok_per_s": output_tokens / duration if duration else math.nan,
        "output_tokens": output_tokens,
        "ttft_ms": distribution_ms([r["ttft_s"] for r in ok]),
        "tpot_ms": distribution_ms(tpots),
        "itl_ms": distribution_ms([gap for r in ok for gap in r["itl_s"]]),
        "e2e_ms": distribution_ms([r["e2e_s"] for r in ok]),
    }
    summary["latencies"] = [
        (r["ttft_s"] * 1000, None if (t := tpot_s(r)) is None else t * 1000, r["e2e_s"] * 1000) for r in ok
    ]
    summary["request_rate"], summary["burstiness"] = run.get("request_rate"), run.get("burstiness")
    summary["achieved_request_rate"] = achieved_rate(records) if run.get("request_rate") else None
    summary["stalls"] = delivery_stalls(ok, summary["itl_ms"].get("p50"))
    summary["scheduling"] = run.get("scheduling")
    summary["server"] = server_view(run.get("server_metrics_delta") or {}, summary)
    summary["prefix_cache_hit_pct"] = prefix_cache_hit_pct(run.get("server_metrics_delta") or {})
    summary["spec_decode"] = spec_decode_view(run.get("server_metrics_delta") or {})
    summary["telemetry"] = telemetry_of(run["telemetry_runs"] if "telemetry_runs" in run else [run.get("telemetry")])
    prompts = [r["prompt_tokens"] for r in ok if r.get("prompt_tokens") is not None]
    summary["prompt_tokens_mean"] = sum(prompts) / len(prompts) if prompts else None
    return summary


def prefix_cache_hit_pct(delta: dict[str, float]) -> float | None:
    """Prompt tokens served from vLLM's prefix cache over the run, % of those looked up (its
    /metrics counters); None where the server does not export them."""
    queries = delta.get("vllm:prefix_cache_queries_total")
    if not queries:
        return None
    return delta.get("vllm:prefix_cache_hits_total", 0.0) / queries * 100


SPEC_PREFIX = "vllm:spec_decode_num_"


def spec_decode_view(delta: dict[str, float]) -> dict[str, Any] | None:
    """Speculative decoding over the run from vLLM's own counters: drafts, draft tokens, accepted
    tokens, and per draft position the share of drafts accepted there. The mean acceptance length
    (tokens a verify step yields, the bonus token included) is 1 + accepted / drafts, as vLLM logs
    it. None where the server does not speculate."""
    drafts = delta.get(SPEC_PREFIX + "drafts_total")
    if not drafts:
        return None
    accepted = delta.get(SPEC_PREFIX + "accepted_tokens_total", 0.0)
    draft_tokens = delta.get(SPEC_PREFIX + "draft_tokens_total", 0.0)
    positions = sorted(
        (int(key.rsplit("[", 1)[1].rstrip("]")), value)
        for key, value in delta.items()
        if key.startswith(SPEC_PREFIX + "accepted_tokens_per_pos_total[")
    )
    return {
        "drafts": int(drafts),
        "draft_tokens": int(draft_tokens),
        "accepted_tokens": int(accepted),
        "mean_acceptance_length": 1 + accepted / drafts,
        "draft_acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "acceptance_by_position": [value / drafts for _, value in positions],
    }


def achieved_rate(records: list[dict[str, Any]]) -> float | None:
    """Requests a second as sent: (sent - 1) over the span from the first send to the last."""
    sent = sorted(r["sent_s"] for r in records if r.get("sent_s") is not None)
    if len(sent) < 2 or sent[-1] <= sent[0]:
        return None
    return (len(sent) - 1) / (sent[-1] - sent[0])


def goodput(
    latencies: list[tuple[float, float | None, float]],
    duration_s: float,
    slo_ttft_ms: float | None,
    slo_tpot_ms: float | None,
    slo_e2e_ms: float | None,
) -> tuple[int, float | None]:
    """Requests that met every SLO set, and those a second of the run (vLLM bench's goodput). A
    request with one output token has no TPOT and meets a TPOT SLO."""
    met = sum(
        1
        for ttft, tpot, e2e in latencies
        if (slo_ttft_ms is None or ttft <= slo_ttft_ms)
        and (slo_e2e_ms is None or e2e <= slo_e2e_ms)
        and (slo_tpot_ms is None or tpot is None or tpot <= slo_tpot_ms)
    )
    return met, (met / duration_s if duration_s else None)


def delivery_stalls(records: list[dict[str, Any]], itl_p50_ms: float | None) -> dict[str, Any]:
    """Gaps far above the run's typical inter-chunk gap: how many, how long, in how many requests."""
    threshold_s = max(STALL_MIN_S, STALL_TIMES_P50 * (itl_p50_ms or 0.0) / 1000)
    per_request = [[gap for gap in r["itl_s"] if gap > threshold_s] for r in records]
    gaps = [gap for found in per_request for gap in found]
    return {
        "threshold_ms": threshold_s * 1000,
        "count": len(gaps),
        "requests_affected": sum(1 for found in per_request if found),
        "total_ms": sum(gaps) * 1000,
        "max_ms": max(gaps, default=0.0) * 1000,
    }


def server_view(delta: dict[str, float], client: dict[str, Any]) -> dict[str, Any]:
    """The server's own means over the run, and how far the client's means are from them."""
    view: dict[str, Any] = {}
    pairs = {
        "ttft_ms": "vllm:time_to_first_token_seconds",
        "tpot_ms": "vllm:request_time_per_output_token_seconds",
        "itl_ms": "vllm:inter_token_latency_seconds",
        "e2e_ms": "vllm:e2e_request_latency_seconds",
    }
    for key, metric in pairs.items():
        count = delta.get(metric + "_count", 0.0)
        if count <= 0:
            continue
        server_mean_ms = delta[metric + "_sum"] / count * 1000
        client_mean = client[key].get("mean")
        entry = {"server_mean_ms": server_mean_ms, "server_count": int(count)}
        if client_mean:
            entry["client_minus_server_pct"] = (client_mean - server_mean_ms) / server_mean_ms * 100
        view[key] = entry
    return view
