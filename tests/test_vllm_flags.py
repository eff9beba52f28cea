"""vLLM's real ``vllm serve`` parser and benchdeck's vLLM validator never disagree (issue 18).

The parser runs in .venv-vllm (``scripts/setup_vllm_env.sh``: each shipped version's wheel
unpacked without dependencies, stubs for what cannot import on a CPU machine), through
``runner/vllm_side/argparse_server.py``:

* the presets, carried over from SGLang by the knob map, validate and parse as meant;
* whatever the validator accepts (hundreds of generated configurations per version),
  rendered by ``render_vllm_argv``, vLLM parses to the values the plan meant;
* broken values the validator rejects, vLLM rejects too.

Policy refusals are stricter than vLLM on purpose and are not part of the comparison; nor
are the leniencies benchdeck refuses by design (underscore spellings, argparse's prefix
matching, full-width digits), each shown by a test of its own below.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.flags.dialects.vllm import (
    FLOAT_TYPES,
    HUMAN_INT_TYPES,
    INT_TYPES,
    JSON_TYPES,
    VllmFlagSpec,
    VllmSchema,
    check_vllm_plan,
    classify_vllm_flag,
    known_vllm_versions,
    load_vllm_policy,
    load_vllm_schema,
    parse_vllm_number,
    render_vllm_argv,
    retarget_vllm_args,
    unclassified_vllm_flags,
    validate_vllm_args,
    vllm_drift,
)
from domain.flags.knobs import align_args, knob_ids, to_vllm_args
from domain.plan.presets import CONFIG_PRESETS
from tests.conftest import ROOT

pytestmark = [pytest.mark.slow]

VENV = ROOT / ".venv-vllm"
PINNED = "0.33.0"  # the newest shipped schema; regenerated and diffed below
OLDER = "0.11.2"
_TEXT = st.from_regex(r"[a-z][a-z0-9_.]{0,12}", fullmatch=True)
_HUMAN_INTS = ["4k", "16k", "1K", "2M", "1.5k"]
# Value types whose conversion the validator models exactly; others (vLLM lambdas, the
# reasoning-parser alias "none") are covered by the presets and the unit tests only.
_GENERATED_TYPES = INT_TYPES | FLOAT_TYPES | HUMAN_INT_TYPES | JSON_TYPES | {"str", "bool"}


# -- the real parser ---------------------------------------------------------------------------


class VllmParser:
    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def parse(self, argv: list[str]) -> dict[str, object]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(argv) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())


def _start_parser(version: str) -> subprocess.Popen[str]:
    source = VENV / "src" / version
    if not (source / "vllm" / "__init__.py").exists():
        pytest.fail(f"no vLLM {version} sources in {source}: run `bash scripts/setup_vllm_env.sh`")
    process = subprocess.Popen(
        [str(VENV / "bin" / "python"), "runner/vllm_side/argparse_server.py", "--source", str(source)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    assert json.loads(process.stdout.readline()) == {"ready": True, "version": version}
    return process


@pytest.fixture(scope="module")
def parsers() -> Iterator[dict[str, VllmParser]]:
    processes = {version: _start_parser(version) for version in known_vllm_versions()}
    yield {version: VllmParser(p) for version, p in processes.items()}
    for process in processes.values():
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)


# -- generated configurations ------------------------------------------------------------------


def eligible_specs(schema: VllmSchema) -> list[VllmFlagSpec]:
    """Flags a plan may set freely: not refused by the policy, not deprecated or hidden."""
    policy = load_vllm_policy()
    refused = {
        *policy.runner_owned,
        *policy.forbidden,
        *policy.value_rules,
        *policy.model_ref_flags,
        *policy.path_flags,
    }
    return [
        spec
        for spec in schema.specs
        if not spec.positional
        and not refused & set(spec.names)
        and not spec.deprecated
        and spec.primary not in spec.hidden
        and spec.nargs != "?"
        and (spec.base_type in _GENERATED_TYPES or spec.choices)
    ]


def element_values(spec: VllmFlagSpec) -> st.SearchStrategy[object]:
    if spec.choices:
        # "None" means unset to an optional flag; whether the choices pass it is its own test.
        return st.sampled_from([c for c in spec.choices if not (spec.optional and c == "None")])
    kind = spec.base_type
    if kind in INT_TYPES:
        return st.integers(min_value=0, max_value=100_000)
    if kind in HUMAN_INT_TYPES:
        return st.one_of(st.integers(min_value=1, max_value=100_000), st.sampled_from(_HUMAN_INTS))
    if kind in FLOAT_TYPES:
        return st.floats(min_value=0.0, max_value=1000.0, allow_nan=False, allow_infinity=False)
    if kind in JSON_TYPES:
        return st.just({})  # a config dataclass with every field at its default
    return _TEXT


def flag_values(spec: VllmFlagSpec) -> st.SearchStrategy[object]:
    if spec.takes_no_value:
        return st.booleans()
    element = element_values(spec)
    if spec.takes_list:
        return st.lists(element, min_size=1 if spec.nargs == "+" else 0, max_size=4)
    return element


@st.composite
def valid_args(draw: st.DrawFn, specs: list[VllmFlagSpec]) -> dict[str, object]:
    chosen = draw(st.lists(st.sampled_from(specs), min_size=1, max_size=8, unique_by=lambda s: s.dest))
    return {spec.primary: draw(flag_values(spec)) for spec in chosen}


def expected_value(spec: VllmFlagSpec, flag: str, value: object) -> object:
    """What vLLM's parser stores for ``value`` written as ``flag`` (JSON-comparable)."""
    if spec.takes_no_value:
        if value is True:
            return not spec.negated(flag)
        return False if spec.negative_name() is not None else spec.default
    if spec.takes_list:
        return [_converted(spec, item) for item in value]  # type: ignore[attr-defined]
    return _converted(spec, value)


def _converted(spec: VllmFlagSpec, value: object) -> object:
    kind = spec.base_type
    if kind in INT_TYPES | HUMAN_INT_TYPES | FLOAT_TYPES and not spec.choices:
        number = parse_vllm_number(kind, value)
        assert isinstance(number, float)
        return number if kind in FLOAT_TYPES else int(number)
    return value


def assert_vllm_reads(parser: VllmParser, args: dict[str, object], version: str) -> None:
    schema = load_vllm_schema(version)
    argv = render_vllm_argv(args, version)
    answer = parser.parse(argv)
    assert answer["ok"], (argv, answer)
    values = answer["values"]
    for flag, value in args.items():
        spec = schema.lookup(flag)
        assert spec is not None
        if spec.base_type in JSON_TYPES:
            continue  # parsed into a config object; "ok" is the check
        assert values[spec.dest] == json.loads(json.dumps(expected_value(spec, flag, value))), (flag, argv)


# -- presets and generated cases ---------------------------------------------------------------


@pytest.mark.parametrize("version", [OLDER, PINNED])
def test_every_preset_carried_to_vllm_validates_and_parses_as_written(
    parsers: dict[str, VllmParser], version: str
) -> None:
    for preset in CONFIG_PRESETS:
        carried = to_vllm_args(preset.server_args, version)
        assert {"tensor-parallel-size", "max-num-seqs", "max-num-batched-tokens"} <= set(carried.args)
        assert "mem-fraction-static" in carried.left  # not the same fraction: never copied
        assert validate_vllm_args(carried.args, version, model_dirs=[]).errors == ()
        assert_vllm_reads(parsers[version], carried.args, version)


PINNED_SPECS = eligible_specs(load_vllm_schema(PINNED))
OLDER_SPECS = eligible_specs(load_vllm_schema(OLDER))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_args(PINNED_SPECS))
def test_what_the_validator_accepts_vllm_parses_to_the_same_values(
    parsers: dict[str, VllmParser], args: dict[str, object]
) -> None:
    assert validate_vllm_args(args, PINNED, model_dirs=[]).errors == ()
    assert_vllm_reads(parsers[PINNED], args, PINNED)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_args(OLDER_SPECS))
def test_the_older_vllm_parses_what_the_validator_accepts_for_it(
    parsers: dict[str, VllmParser], args: dict[str, object]
) -> None:
    assert validate_vllm_args(args, OLDER, model_dirs=[]).errors == ()
    assert_vllm_reads(parsers[OLDER], args, OLDER)


INT_FLAGS = sorted(s.primary for s in PINNED_SPECS if s.base_type == "int" and not s.takes_list and not s.choices)
CHOICE_FLAGS = sorted(s.primary for s in PINNED_SPECS if s.choices and not s.takes_list and s.base_type == "str")


@st.composite
def broken_case(draw: st.DrawFn) -> tuple[dict[str, object], list[str]]:
    """One broken flag, as server_args and as the argv a careless user would type."""
    kind = draw(st.sampled_from(["int", "choice", "unknown"]))
    if kind == "int":
        flag = draw(st.sampled_from(INT_FLAGS))
        text = draw(st.sampled_from(["abc", "1.5", "1e3", "0x10", "nan", "8k"]))
        return {flag: text}, [f"--{flag}", text]
    if kind == "choice":
        flag = draw(st.sampled_from(CHOICE_FLAGS))
        text = draw(st.from_regex(r"zz[a-z]{1,8}", fullmatch=True))
        return {flag: text}, [f"--{flag}", text]
    name = draw(st.from_regex(r"zz-[a-z]{1,10}", fullmatch=True))  # no vLLM flag starts with "zz"
    return {name: True}, [f"--{name}"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_case())
def test_what_vllm_rejects_the_validator_rejects_too(
    parsers: dict[str, VllmParser], case: tuple[dict[str, object], list[str]]
) -> None:
    args, argv = case
    assert validate_vllm_args(args, PINNED, model_dirs=[]).errors, args
    assert not parsers[PINNED].parse(argv)["ok"], argv


# -- leniencies refused by design ---------------------------------------------------------------


def test_vllm_reads_underscores_as_dashes_which_we_refuse_with_the_dashed_name(parsers: dict[str, VllmParser]) -> None:
    answer = parsers[PINNED].parse(["--max_num_seqs", "3"])
    assert answer["ok"] and answer["values"]["max_num_seqs"] == 3
    issue = validate_vllm_args({"max_num_seqs": 3}, PINNED, model_dirs=[]).issues[0]
    assert (issue.code, issue.detail, issue.candidates) == ("unknown_flag", "vllm_underscore", ("max-num-seqs",))


def test_vllm_prefix_matches_a_unique_prefix_which_we_refuse_with_the_nearest_name(
    parsers: dict[str, VllmParser],
) -> None:
    answer = parsers[PINNED].parse(["--gpu-memory-util", "0.8"])
    assert answer["ok"] and answer["values"]["gpu_memory_utilization"] == 0.8
    issue = validate_vllm_args({"gpu-memory-util": 0.8}, PINNED, model_dirs=[]).issues[0]
    assert issue.code == "unknown_flag" and issue.candidates[0] == "gpu-memory-utilization"


def test_vllm_reads_full_width_digits_which_we_refuse(parsers: dict[str, VllmParser]) -> None:
    answer = parsers[PINNED].parse(["--max-num-seqs", "８"])
    assert answer["ok"] and answer["values"]["max_num_seqs"] == 8
    assert validate_vllm_args({"max-num-seqs": "８"}, PINNED, model_dirs=[]).codes() == ["bad_value"]


def test_none_for_an_optional_choice_is_refused_where_vllm_refuses_it(parsers: dict[str, VllmParser]) -> None:
    """vLLM 0.11.2 lists the string 'None' among --kv-offloading-backend's choices, but its
    optional_type turns the text None into None first, which argparse then refuses."""
    assert not parsers[OLDER].parse(["--kv-offloading-backend", "None"])["ok"]
    assert validate_vllm_args({"kv-offloading-backend": "None"}, OLDER, model_dirs=[]).codes() == ["bad_choice"]
    answer = parsers[PINNED].parse(["--kv-offloading-backend", "None"])
    pinned_codes = validate_vllm_args({"kv-offloading-backend": "None"}, PINNED, model_dirs=[]).codes()
    assert answer["ok"] == (pinned_codes == [])


def test_human_readable_ints_follow_vllm_not_sglang(parsers: dict[str, VllmParser]) -> None:
    """vLLM: 1M = 2**20 and 1.5K is refused; SGLang reads M as 10**6."""
    answer = parsers[PINNED].parse(["--max-num-batched-tokens", "1M"])
    assert answer["values"]["max_num_batched_tokens"] == 2**20 == parse_vllm_number("human_readable_int", "1M")
    assert not parsers[PINNED].parse(["--max-num-batched-tokens", "1.5K"])["ok"]
    assert validate_vllm_args({"max-num-batched-tokens": "1.5K"}, PINNED, model_dirs=[]).codes() == ["bad_type"]


# -- drift, policy, risk, schema ----------------------------------------------------------------


def test_a_flag_renamed_between_the_shipped_versions_is_translated(parsers: dict[str, VllmParser]) -> None:
    plan = {"cuda-graph-sizes": [1, 2, 4, 8], "max-num-seqs": 8}
    reports = check_vllm_plan(plan, model_dirs=[])
    assert list(reports) == known_vllm_versions() == [OLDER, PINNED]
    older = reports[OLDER].for_flag("cuda-graph-sizes")[0]
    assert (older.severity, older.code) == ("warning", "deprecated")
    newer = reports[PINNED].for_flag("cuda-graph-sizes")[0]
    assert (newer.code, newer.params["last"]) == ("removed_in_version", OLDER)
    assert newer.translation is not None and dict(newer.translation.add) == {"cudagraph-capture-sizes": [1, 2, 4, 8]}
    moved, done = retarget_vllm_args(plan, PINNED)
    assert validate_vllm_args(moved, PINNED, model_dirs=[]).errors == () and len(done) == 1
    assert_vllm_reads(parsers[PINNED], moved, PINNED)


def test_the_drift_table_names_each_rename_and_removal() -> None:
    rows = {row.flag: row for row in vllm_drift(OLDER, PINNED)}
    assert (
        rows["cuda-graph-sizes"].status == "renamed"
        and rows["cuda-graph-sizes"].replacement == "cudagraph-capture-sizes"
    )
    assert rows["swap-space"].status == "removed" and rows["swap-space"].replacement is None
    assert rows["max-num-queued-reqs"].status == "added"
    assert rows["dcp-kv-cache-interleave-size"].status == "deprecated"


def test_an_unknown_flag_is_refused_with_the_nearest_real_name() -> None:
    issue = validate_vllm_args({"max-num-seq": 8}, PINNED, model_dirs=[]).issues[0]
    assert (issue.code, issue.candidates[0]) == ("unknown_flag", "max-num-seqs")
    assert "vLLM 0.33.0" in issue.message("en") and "vLLM 0.33.0" in issue.message("ja")


@pytest.mark.parametrize(
    ("args", "code", "detail"),
    [
        ({"trust-remote-code": True}, "forbidden", None),
        ({"host": "0.0.0.0"}, "forbidden", "non_loopback_host"),  # noqa: S104 (the refused value)
        ({"api-key": ["secret"]}, "forbidden", None),
        ({"hf-token": "hf_x"}, "forbidden", None),
        ({"served-model-name": ["x"]}, "runner_owned", None),
        ({"port": 8000}, "runner_owned", None),
        ({"distributed-executor-backend": "ray"}, "forbidden", "value"),
        ({"tokenizer": "../etc"}, "bad_model_ref", "relative_path"),
    ],
)
def test_the_security_policy_refuses(args: dict[str, object], code: str, detail: str | None) -> None:
    issue = validate_vllm_args(args, PINNED, model_dirs=[Path("/models")]).issues[0]
    assert (issue.code, issue.detail) == (code, detail)


@pytest.mark.parametrize("version", [OLDER, PINNED])
def test_every_vllm_flag_has_a_risk_layer(version: str) -> None:
    assert unclassified_vllm_flags(load_vllm_schema(version)) == []
    assert classify_vllm_flag("no-enable-prefix-caching").id == "cache"  # a negative spelling
    assert classify_vllm_flag("speculative-config").risk == "high"


def test_the_pinned_schema_is_what_the_dump_makes_from_the_real_wheel() -> None:
    source = VENV / "src" / PINNED
    dumped = subprocess.run(
        [str(VENV / "bin" / "python"), "runner/vllm_side/schema_dump.py", "--source", str(source)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    shipped = json.loads((ROOT / "domain" / "flags" / "schemas" / f"vllm_args_{PINNED}.json").read_text("utf-8"))
    fresh = json.loads(dumped)
    # Only the interpreter's own version may differ; regenerate with the dump script otherwise.
    assert {**fresh, "python": None} == {**shipped, "python": None}
    assert "torch" in fresh["stubbed"]  # stubbed and said so


# -- the knob map ------------------------------------------------------------------------------


def test_an_sglang_run_and_a_vllm_run_line_up_knob_by_knob() -> None:
    sglang = {
        "tp-size": 8,
        "ep-size": 2,
        "max-running-requests": 256,
        "mem-fraction-static": 0.88,
        "schedule-policy": "lpm",
    }
    vllm = {"tensor-parallel-size": 8, "enable-expert-parallel": True, "max-num-seqs": 256, "async-scheduling": True}
    rows = align_args(sglang, vllm)
    assert knob_ids(rows) == ["max_running", "memory_fraction", "tensor_parallel", "expert_parallel", "schedule_policy"]
    by_id = {row.knob.id: row for row in rows if row.knob is not None}
    assert by_id["max_running"].paired and by_id["max_running"].equivalent
    assert not by_id["expert_parallel"].equivalent  # a size on SGLang, a switch on vLLM
    assert not by_id["memory_fraction"].paired  # only SGLang set it
    lone = [row for row in rows if row.knob is None]
    assert [(dict(r.sglang), dict(r.vllm)) for r in lone] == [({}, {"async-scheduling": True})]
    assert all(row.no_counterpart for row in lone)


def test_every_knob_names_flags_the_shipped_schemas_have() -> None:
    from domain.flags.dialects.vllm import all_vllm_schemas
    from domain.flags.knobs import knobs
    from domain.flags.schema import all_schemas

    sglang, vllm = all_schemas(), all_vllm_schemas()
    for knob in knobs():
        assert all(any(flag in s for s in sglang) for flag in knob.sglang), knob.id
        assert all(any(flag in s for s in vllm) for flag in knob.vllm), knob.id


def test_runner_check_lines_name_the_vllm_version_in_both_languages() -> None:
    from domain.flags.dialects.vllm import vllm_check_messages

    plan = {"cuda-graph-sizes": [1, 2], "max-num-seqs": 8}
    for lang in ("ja", "en"):
        check = vllm_check_messages(plan, lang, model_dirs=[], model="Qwen/Qwen3-8B")
        assert [line.split(":")[0] for line in check.errors] == [f"vLLM {PINNED}"]
        assert [line.split(":")[0] for line in check.warnings] == [f"vLLM {OLDER}"]
        assert "--cudagraph-capture-sizes 1 2" in check.detail
    pinned_only = vllm_check_messages(plan, "en", model_dirs=[], versions=[OLDER])
    assert pinned_only.errors == ()


def test_the_contest_rules_judge_vllm_flags_by_the_same_layers() -> None:
    from domain.flags.dialects.vllm import assess_vllm_risk

    report = assess_vllm_risk({"kv-cache-dtype": "fp8", "speculative-config": {}, "max-num-seqs": 8}, PINNED)
    assert {b.flag for b in report.broken} >= {"kv-cache-dtype"}
    assert report.highest == "high"
    assert not assess_vllm_risk({"disable-prefix-caching": True, "max-num-seqs": 8}, PINNED).broken
