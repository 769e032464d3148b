"""Bad input beyond campaign.toml and the state file (those are in test_malformed_inputs.py):
the decision rules, the kernel rules (rules.toml), the ledger and traces, plus config values of
the wrong type. Table-driven: every case exits 2 with one line on stderr naming the file and,
where there is one, the option, rule, record or key; no traceback; every file on disk unchanged."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from orchestrate.main import main
from tasks.analysis.categories import RULES_PATH as KERNEL_RULES
from tasks.decisions.rules import RULES_PATH as DECISION_RULES

TRACE = gzip.decompress((Path(__file__).parent / "data" / "gpu_decode_trace.json.gz").read_bytes()).decode()
SHIPPED = DECISION_RULES.read_text()
KERNELS = KERNEL_RULES.read_text()
QUICK = '[campaign]\nname = "quick"\nphases = []\n'
WITH_RULES = QUICK + 'decision_rules = "r.toml"\n'


def rules(old: str, new: str) -> str:
    assert old in SHIPPED, old
    return SHIPPED.replace(old, new, 1)


def kernels(old: str, new: str) -> str:
    assert old in KERNELS, old
    return KERNELS.replace(old, new, 1)


OPTION = '[[option]]\nid = "x"\ntitle = "X"\nwhen = "tp > 1"\ngain_ms = "{gain}"\nwhy = "w"\n'
RECORD = {
    "id": "a",
    "campaign": "c",
    "experiment": "e",
    "option": "o",
    "change": "x",
    "model": "m",
    "hardware": "h",
    "vllm": None,
    "concurrency": 1,
    "predicted_ms": 1.0,
    "realised_ms": 1.0,
    "realised_low_ms": 0.9,
    "realised_high_ms": 1.1,
    "recorded_at": "2026-12-04T00:00:00Z",
}


def ledger(**change: object) -> str:
    return json.dumps({"version": 1, "records": [RECORD]} | change)


# (kind, case, files {name: text}, arguments, expected fragment of the one line)
CASES = [
    # -- decision rules (campaign.decision_rules names them: init refuses before anything runs) --
    (
        "decision rules",
        "misspelt assumption",
        {
            "r.toml": rules(
                "half_tp_gemm_extra_ms + half_tp_host_saving_ms",
                "half_tp_gemm_extra_ms + half_tp_host_savng_ms",
            )
        },
        ["init"],
        "unknown name 'half_tp_host_savng_ms' (did you mean 'half_tp_host_saving_ms'?)",
    ),
    (
        "decision rules",
        "misspelt figure in when",
        {"r.toml": rules('when = "tp > 1 and moe_layers > 0"', 'when = "tp > 1 and moe_layer > 0"')},
        ["init"],
        "option 'expert_parallelism' key 'when': unknown name 'moe_layer'",
    ),
    (
        "decision rules",
        "misspelt spec rate",
        {"r.toml": rules("spec_accept_rate = 0.6", "spec_accept_rat = 0.6")},
        ["init"],
        "computed from the assumption 'spec_accept_rate'",
    ),
    (
        "decision rules",
        "measured names no input",
        {"r.toml": rules("measured = { spec_expected_tokens", "measured = { comm_ms")},
        ["init"],
        "'comm_ms' is no input of this option's when/gain_ms",
    ),
    (
        "decision rules",
        "measured unknown name",
        {"r.toml": rules('"x_spec_tokens_per_step"', '"x_spec_tokens_a_step"')},
        ["init"],
        "unknown name 'x_spec_tokens_a_step'",
    ),
    (
        "decision rules",
        "NaN assumption",
        {"r.toml": rules("spec_tokens = 3", "spec_tokens = nan")},
        ["init"],
        "assumptions.spec_tokens: nan is not a finite number",
    ),
    (
        "decision rules",
        "inf assumption",
        {"r.toml": rules("kv_fp8_bytes_ratio = 0.5", "kv_fp8_bytes_ratio = inf")},
        ["init"],
        "assumptions.kv_fp8_bytes_ratio: inf is not a finite number",
    ),
    (
        "decision rules",
        "rate of one",
        {"r.toml": rules("spec_accept_rate = 0.6", "spec_accept_rate = 1.0")},
        ["init"],
        "assumptions.spec_accept_rate: 1 is a rate, so in [0, 1)",
    ),
    (
        "decision rules",
        "negative rate",
        {"r.toml": rules("spec_accept_rate = 0.6", "spec_accept_rate = -0.2")},
        ["init"],
        "is a rate, so in [0, 1)",
    ),
    (
        "decision rules",
        "assumption a string",
        {"r.toml": rules("spec_tokens = 3", 'spec_tokens = "3"')},
        ["init"],
        "assumptions.spec_tokens",
    ),
    (
        "decision rules",
        "syntax error",
        {"r.toml": OPTION.format(gain="tp *")},
        ["init"],
        "option 'x' key 'gain_ms': not a formula",
    ),
    ("decision rules", "attribute", {"r.toml": OPTION.format(gain="tp.real")}, ["init"], "'tp.real' is not allowed"),
    ("decision rules", "string constant", {"r.toml": OPTION.format(gain="'a'")}, ["init"], "is not allowed"),
    (
        "decision rules",
        "other call",
        {"r.toml": OPTION.format(gain="pow(tp, 2)")},
        ["init"],
        "only min, max and abs may be called",
    ),
    ("decision rules", "subscript", {"r.toml": OPTION.format(gain="tp[0]")}, ["init"], "is not allowed"),
    ("decision rules", "lambda", {"r.toml": OPTION.format(gain="(lambda: 1)")}, ["init"], "is not allowed"),
    ("decision rules", "true constant", {"r.toml": OPTION.format(gain="True")}, ["init"], "'True' is not allowed"),
    (
        "decision rules",
        "too long",
        {"r.toml": OPTION.format(gain="+".join(["tp"] * 1200))},
        ["init"],
        "longer than 2000 characters",
    ),
    (
        "decision rules",
        "tp expression",
        {"r.toml": rules('tensor_parallel = "tp / 2"', 'tensor_parallel = "gpus / 2"')},
        ["init"],
        "key 'apply.tensor_parallel': unknown name 'gpus'",
    ),
    (
        "decision rules",
        "apply drafts otherwise than the settings",
        {
            "r.toml": rules(
                '"ngram_gpu", "num_speculative_tokens": 3, "prompt_lookup_max": 4',
                '"ngram_gpu", "num_speculative_tokens": 3, "prompt_lookup_max": 6',
            )
        },
        ["init"],
        "option 'speculative_decoding_gpu' key 'apply.extra_args': its --speculative-config sets prompt_lookup_max 6"
        " against prompt_lookup_max = 4 in [assumptions]",
    ),
    (
        "decision rules",
        "id twice",
        {"r.toml": SHIPPED + OPTION.format(gain="1").replace('"x"', '"lower_tp"', 1)},
        ["init"],
        "an option id appears twice (lower_tp)",
    ),
    (
        "decision rules",
        "no gain",
        {"r.toml": '[[option]]\nid = "x"\ntitle = "X"\nwhen = "tp > 1"\nwhy = "w"\n'},
        ["init"],
        "option 'x' key 'gain_ms': Field required",
    ),
    (
        "decision rules",
        "unknown key",
        {"r.toml": rules("\ncompromises_precision = true", "\ncompromises_precission = true")},
        ["init"],
        "unknown key",
    ),
    ("decision rules", "not TOML", {"r.toml": "[[option]\n"}, ["init"], "not valid TOML"),
    ("decision rules", "no option", {"r.toml": "min_gain_pct = 3\n"}, ["init"], "option"),
    (
        "decision rules",
        "bad id",
        {"r.toml": OPTION.format(gain="1").replace('"x"', '"X Y"', 1)},
        ["init"],
        "option 'X Y' key 'id'",
    ),
    (
        "decision rules",
        "min gain a string",
        {"r.toml": 'min_gain_pct = "3"\n' + OPTION.format(gain="1")},
        ["init"],
        "min_gain_pct",
    ),
    ("decision rules", "missing file", {}, ["init"], "field 'campaign.decision_rules': r.toml is not a file"),
    ("decision rules", "a folder", {"r.toml/": ""}, ["check"], "field 'campaign.decision_rules': r.toml is not a file"),
    (
        "decision rules",
        "check refuses too",
        {"r.toml": OPTION.format(gain="nonsense_ms")},
        ["check"],
        "unknown name 'nonsense_ms'",
    ),
    # -- campaign values of the wrong type or that name nothing (strict: nothing coerced) --
    (
        "campaign.toml",
        "bool for a count",
        {"campaign.toml": "[macro]\nconcurrency_max = true\n"},
        ["init"],
        "macro.concurrency_max",
    ),
    (
        "campaign.toml",
        "string for a count",
        {"campaign.toml": '[macro]\noutput_tokens = "64"\n'},
        ["init"],
        "macro.output_tokens",
    ),
    (
        "campaign.toml",
        "float for a count",
        {"campaign.toml": "[service]\ntensor_parallel = 1.5\n"},
        ["init"],
        "service.tensor_parallel",
    ),
    ("campaign.toml", "bool for a port", {"campaign.toml": "[service]\nport = false\n"}, ["init"], "service.port"),
    ("campaign.toml", "number for a path", {"campaign.toml": "[service]\nmodel = 5\n"}, ["init"], "service.model"),
    ("campaign.toml", "empty command", {"campaign.toml": "[service]\ncommand = []\n"}, ["init"], "service.command"),
    ("campaign.toml", "empty model", {"campaign.toml": '[service]\nmodel = ""\n'}, ["init"], "service.model"),
    (
        "campaign.toml",
        "env value a number",
        {"campaign.toml": "[service]\nenv = { A = 1 }\n"},
        ["init"],
        "service.env.A",
    ),
    (
        "campaign.toml",
        "bool for capture list",
        {"campaign.toml": "[gemm]\nbatch_sizes = [true]\n"},
        ["init"],
        "gemm.batch_sizes.0",
    ),
    (
        "campaign.toml",
        "applied option typo",
        {"campaign.toml": QUICK + 'applied_option = "int4_weight"\n'},
        ["init"],
        "'int4_weight' is not an option of decision_rules.toml (did you mean 'int4_weights'?)",
    ),
    (
        "campaign.toml",
        "baseline missing",
        {"campaign.toml": QUICK + 'baseline = "old/todo.json"\n'},
        ["check"],
        "field 'campaign.baseline': old/todo.json does not exist",
    ),
    (
        "campaign.toml",
        "experiment option typo",
        {"campaign.toml": QUICK + '[[experiments]]\noption = "lower_t"\n'},
        ["init"],
        "'lower_t' is not an option",
    ),
    (
        "campaign.toml",
        "experiment drafts otherwise than the rules",
        {
            "campaign.toml": QUICK
            + '[[experiments]]\noption = "speculative_decoding"\nextra_args = ["--speculative-config",'
            + ' \'{"method": "ngram", "num_speculative_tokens": 5}\']\n'
        },
        ["init"],
        "field 'experiments.0.extra_args': its --speculative-config sets num_speculative_tokens 5 against"
        " spec_tokens = 3 in decision_rules.toml's [assumptions]",
    ),
    (
        "campaign.toml",
        "auto experiments a string",
        {"campaign.toml": QUICK + 'auto_experiments = "yes"\n'},
        ["init"],
        "campaign.auto_experiments",
    ),
    (
        "campaign.toml",
        "other name for the file",
        {"other.toml": QUICK + '[[experiments]]\noption = "nope"\n'},
        ["--config", "other.toml", "init"],
        "other.toml: field 'experiments.0.option'",
    ),
    (
        "campaign.toml",
        "trace missing",
        {"campaign.toml": '[macro]\ntrace = "nope.csv"\n'},
        ["init"],
        "nope.csv: no such trace file",
    ),
    (
        "campaign.toml",
        "trace row",
        {"campaign.toml": '[macro]\ntrace = "t.csv"\n', "t.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,x\n"},
        ["init"],
        "t.csv:2: GeneratedTokens 'x' is not a whole number",
    ),
    (
        "campaign.toml",
        "trace too long",
        {
            "campaign.toml": '[macro]\ntrace = "t.jsonl"\n',
            "t.jsonl": '{"timestamp": 0, "input_length": 5000, "output_length": 8}\n',
        },
        ["init"],
        "1 of 1 arrivals of t.jsonl need more than service.max_model_len = 1024",
    ),
    (
        "campaign.toml",
        "trace with a dataset",
        {"campaign.toml": '[macro]\ntrace = "t.csv"\ndataset = "synthetic"\n'},
        ["init"],
        "field 'macro.dataset': a trace is replayed with random prompts",
    ),
    (
        "campaign.toml",
        "shared prefix too long",
        {"campaign.toml": "[macro]\nshared_prefix_tokens = 64\n"},
        ["init"],
        "shared_prefix_tokens is part of input_tokens",
    ),
    (
        "campaign.toml",
        "shared prefix with a dataset",
        {"campaign.toml": '[macro]\nshared_prefix_tokens = 8\ndataset = "synthetic"\n'},
        ["init"],
        "shared_prefix_tokens goes with random prompts",
    ),
    ("campaign.toml", "trace speed 0", {"campaign.toml": "[macro]\ntrace_speed = 0\n"}, ["init"], "macro.trace_speed"),
    (
        "campaign.toml",
        "auto ranking at a level not served",
        {"campaign.toml": "[campaign]\nauto_rank_concurrency = 3\n"},
        ["init"],
        "field 'campaign.auto_rank_concurrency': 3 is not a level this campaign serves (1, 2, 4, 8)",
    ),
    (
        "campaign.toml",
        "conversation history over max_model_len",
        {"campaign.toml": "[macro]\nconversations = 1\nconversation_turns = 20\n"},
        ["init"],
        "field 'macro.conversation_turns'",
    ),
    # -- the kernel rules (analyze --rules) --
    ("rules.toml", "not TOML", {"k.toml": "[[rule]\n"}, ["analyze", "--rules", "k.toml", "t.json"], "not valid TOML"),
    (
        "rules.toml",
        "misspelt key",
        {"k.toml": kernels("patterns = [", "pattern = [")},
        ["analyze", "--rules", "k.toml", "t.json"],
        "key 'pattern': unknown key (did you mean 'patterns'?)",
    ),
    (
        "rules.toml",
        "no category",
        {"k.toml": 'categories = ["communication", "gemm", "attention", "moe"]\n[[rule]]\npatterns = ["x"]\n'},
        ["analyze", "--rules", "k.toml", "t.json"],
        "category",
    ),
    (
        "rules.toml",
        "empty patterns",
        {
            "k.toml": 'categories = ["communication", "gemm", "attention", "moe"]\n[[rule]]\ncategory = "gemm"\npatterns = []\n'
        },
        ["analyze", "--rules", "k.toml", "t.json"],
        "key 'patterns': empty",
    ),
    (
        "rules.toml",
        "empty pattern",
        {"k.toml": kernels("patterns = [", 'patterns = ["", ')},
        ["analyze", "--rules", "k.toml", "t.json"],
        "'' matches every name",
    ),
    (
        "rules.toml",
        "dot star",
        {"k.toml": kernels("patterns = [", 'patterns = [".*", ')},
        ["analyze", "--rules", "k.toml", "t.json"],
        "'.*' matches every name",
    ),
    (
        "rules.toml",
        "bad regex",
        {"k.toml": kernels("patterns = [", 'patterns = ["(", ')},
        ["analyze", "--rules", "k.toml", "t.json"],
        "is not a regular expression",
    ),
    (
        "rules.toml",
        "bad category name",
        {
            "k.toml": 'categories = ["communication", "gemm", "attention", "moe"]\n[[rule]]\ncategory = "Gemm"\npatterns = ["x"]\n'
        },
        ["analyze", "--rules", "k.toml", "t.json"],
        "is not a lower-case name",
    ),
    (
        "rules.toml",
        "undeclared category",
        {
            "k.toml": 'categories = ["communication", "gemm", "attention", "moe"]\n[[rule]]\ncategory = "attn"\npatterns = ["x"]\n'
        },
        ["analyze", "--rules", "k.toml", "t.json"],
        "rules use attn",
    ),
    (
        "rules.toml",
        "communication renamed",
        {"k.toml": KERNELS.replace('"communication"', '"comms"')},
        ["analyze", "--rules", "k.toml", "t.json"],
        "lacks communication",
    ),
    (
        "rules.toml",
        "patterns a string",
        {
            "k.toml": 'categories = ["communication", "gemm", "attention", "moe"]\n[[rule]]\ncategory = "gemm"\npatterns = "x"\n'
        },
        ["analyze", "--rules", "k.toml", "t.json"],
        "patterns",
    ),
    (
        "rules.toml",
        "own_time a string",
        {"k.toml": kernels("patterns = [", 'own_time = "yes"\npatterns = [')},
        ["analyze", "--rules", "k.toml", "t.json"],
        "own_time",
    ),
    (
        "rules.toml",
        "no rule",
        {"k.toml": 'categories = ["communication", "gemm", "attention", "moe"]\n'},
        ["analyze", "--rules", "k.toml", "t.json"],
        "rule",
    ),
    ("rules.toml", "missing file", {}, ["analyze", "--rules", "k.toml", "t.json"], "k.toml"),
    # -- the ledger --
    ("ledger", "not JSON", {"l.json": "{"}, ["ledger", "--ledger", "l.json"], "l.json: not valid JSON"),
    (
        "ledger",
        "newer version",
        {"l.json": ledger(version=2)},
        ["ledger", "--ledger", "l.json"],
        "field 'version': 2 is not a ledger version",
    ),
    (
        "ledger",
        "no version",
        {"l.json": json.dumps({"records": []})},
        ["ledger", "--ledger", "l.json"],
        "field 'version': None",
    ),
    (
        "ledger",
        "id twice",
        {"l.json": json.dumps({"version": 1, "records": [RECORD, RECORD]})},
        ["ledger", "--ledger", "l.json"],
        "record id 'a' appears twice",
    ),
    (
        "ledger",
        "record lacks a field",
        {"l.json": json.dumps({"version": 1, "records": [{k: v for k, v in RECORD.items() if k != "option"}]})},
        ["ledger", "--ledger", "l.json"],
        "record 1 (a) field 'option'",
    ),
    (
        "ledger",
        "wrong type",
        {"l.json": json.dumps({"version": 1, "records": [RECORD | {"concurrency": "one"}]})},
        ["ledger", "--ledger", "l.json"],
        "record 1 (a) field 'concurrency'",
    ),
    (
        "ledger",
        "records not a list",
        {"l.json": json.dumps({"version": 1, "records": {}})},
        ["ledger", "--ledger", "l.json"],
        "records",
    ),
    ("ledger", "a list document", {"l.json": "[]"}, ["ledger", "--ledger", "l.json"], "l.json"),
    ("ledger", "a folder", {"l.json/": ""}, ["ledger", "--ledger", "l.json"], "is a folder"),
    (
        "ledger",
        "unknown key",
        {"l.json": json.dumps({"version": 1, "records": [RECORD | {"colour": 1}]})},
        ["ledger", "--ledger", "l.json"],
        "record 1 (a) field 'colour'",
    ),
    # -- traces --
    ("trace", "truncated JSON", {"t.json": TRACE[: len(TRACE) // 2]}, ["analyze", "t.json"], "t.json"),
    (
        "trace",
        "NaN",
        {"t.json": TRACE.replace('"dur": ', '"dur": NaN, "was": ', 1)},
        ["analyze", "t.json"],
        "NaN at byte",
    ),
    (
        "trace",
        "Infinity",
        {"t.json": TRACE.replace('"dur": ', '"dur": Infinity, "was": ', 1)},
        ["analyze", "t.json"],
        "Infinity at byte",
    ),
    ("trace", "html", {"t.json": "<html>502 Bad Gateway</html>"}, ["analyze", "t.json"], "t.json"),
    ("trace", "empty", {"t.json": ""}, ["analyze", "t.json"], "t.json"),
    ("trace", "no events", {"t.json": '{"traceEvents": []}'}, ["analyze", "t.json"], "no device or CPU op events"),
    ("trace", "text after", {"t.json": TRACE.rstrip() + " trailing"}, ["analyze", "t.json"], "t.json"),
    (
        "trace",
        "dur a string",
        {"t.json": TRACE.replace('"dur": ', '"dur": "5", "was": ', 1)},
        ["analyze", "t.json"],
        "t.json",
    ),
    ("trace", "missing", {}, ["analyze", "t.json"], "t.json"),
    ("trace", "folder without traces", {"d/": ""}, ["analyze", "d"], "d"),
    ("trace", "bad gzip", {"t.json.gz": "not gzip at all"}, ["analyze", "t.json.gz"], "t.json.gz"),
]


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("kind, case, files, args, expected", CASES, ids=[f"{c[0]}: {c[1]}" for c in CASES])
def test_malformed_input_is_one_line_exit_2_nothing_changed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    kind: str,
    case: str,
    files: dict[str, str],
    args: list[str],
    expected: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    if kind == "decision rules":
        (tmp_path / "campaign.toml").write_text(WITH_RULES)
    if args[0] == "analyze" and "t.json" in args and "t.json" not in files and case != "missing":
        (tmp_path / "t.json").write_text(TRACE)  # a good trace: the rules are what is wrong
    for name, text in files.items():
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text(text)
    before = snapshot(tmp_path)
    code = main(list(args))
    err = capsys.readouterr().err
    assert code == 2, (case, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert expected in err, err
    assert snapshot(tmp_path) == before
