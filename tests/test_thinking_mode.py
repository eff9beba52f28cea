"""Thinking mode that is real (domain/plan/thinking.py): what the bench client is told to
send, the plans refused because their requests cannot carry it, the served template
checked by rendering it, and the emulator whose outputs grow when the model reasons."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from domain.core.settings import Settings
from domain.flags.schema import SCHEMA_DIR
from domain.plan.checks import check_plan, thinking_checks
from domain.plan.plan_io import PlanError, load_yaml_mapping, plan_from_mapping
from domain.plan.run_plan import BenchmarkPlan, RunPlan
from domain.plan.thinking import bench_argv_extras, served_template, takes_enable_thinking
from emulator.build_tokenizer import build
from emulator.testing import EmulatorProcess, running_emulator
from emulator.tokens import EMPTY_THINK_BLOCK, TokenText
from tests.conftest import ROOT
from tests.plans import MINIMAL_PLAN_YAML

CHAT = {"backend": "sglang-oai-chat", "tokenize_prompt": False, "apply_chat_template": True}
# The generation-prompt part of Qwen3's chat template, as SGLang's template detection
# (sglang/srt/parser/template_detection.py, enable_thinking_default_true) recognises it.
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _plan(engine: str = "emulator", model: str = "Qwen/Qwen3-30B-A3B", **bench: Any) -> RunPlan:
    data = load_yaml_mapping(MINIMAL_PLAN_YAML, max_bytes=1 << 20)
    data.update(engine=engine, model=model)
    data["benchmark"] = {**data["benchmark"], **bench}
    if engine == "sglang":
        data["server_args"] = {"tp-size": 1}
    return plan_from_mapping(data)


# --- what the bench client sends -------------------------------------------------------------


@pytest.mark.parametrize(("mode", "flag"), [("on", True), ("off", False)])
def test_thinking_goes_into_every_chat_request_body(mode: str, flag: bool) -> None:
    argv = bench_argv_extras(BenchmarkPlan(**CHAT, thinking_mode=mode))
    assert argv[0] == "--extra-request-body" and len(argv) == 2
    assert json.loads(argv[1]) == {"chat_template_kwargs": {"enable_thinking": flag},
                                   "stream_options": {"include_usage": True}}


def test_no_thinking_mode_sends_nothing_extra() -> None:
    assert bench_argv_extras(BenchmarkPlan(**CHAT)) == []
    assert bench_argv_extras(BenchmarkPlan()) == []


def test_the_installed_client_takes_the_extras() -> None:
    client = ROOT / ".venv-sglang" / "lib" / "python3.11" / "site-packages" / "sglang" / "benchmark" / "serving.py"
    if not client.is_file():
        pytest.skip("needs the SGLang environment (.venv-sglang)")
    source = client.read_text(encoding="utf-8")
    assert '"--extra-request-body"' in source and "payload.update(request_func_input.extra_request_body)" in source


# --- plans whose requests cannot carry it ----------------------------------------------------


@pytest.mark.parametrize(("bench", "kind", "ja_part"), [
    ({"thinking_mode": "on"}, "thinking_no_template", "テンプレートが適用されません"),
    ({"thinking_mode": "off", "backend": "sglang-oai", "tokenize_prompt": False},
     "thinking_no_template", "テンプレートが適用されません"),
    ({"thinking_mode": "on", "backend": "sglang-oai", "tokenize_prompt": False, "apply_chat_template": True},
     "thinking_client_template", "enable_thinking を渡せません"),
    ({"backend": "sglang-oai-chat", "tokenize_prompt": False}, "chat_template_implied", "チャットテンプレート"),
])
def test_a_plan_that_cannot_apply_thinking_is_refused_with_the_reason(bench: dict[str, Any], kind: str,
                                                                     ja_part: str) -> None:
    with pytest.raises(PlanError) as info:
        _plan(**bench)
    [problem] = info.value.problems
    assert problem.kind == kind and problem.field == "benchmark"
    assert ja_part in problem.text("ja") and problem.text("en").endswith(".")


def test_a_chat_plan_with_thinking_is_accepted() -> None:
    assert _plan(**CHAT, thinking_mode="on", ignore_eos=False).benchmark.thinking_mode == "on"


# --- the served template ------------------------------------------------------------------------


def test_a_template_takes_enable_thinking_when_it_renders_differently() -> None:
    assert takes_enable_thinking(QWEN3_TEMPLATE) is True
    assert takes_enable_thinking(CHATML_TEMPLATE) is False
    assert takes_enable_thinking("{{ raise_exception('needs the server') }}") is None


def _model_dir(tmp_path: Path, template: str, *, as_jinja: bool) -> Path:
    directory = tmp_path / "model"
    directory.mkdir()
    if as_jinja:
        (directory / "chat_template.jinja").write_text(template, encoding="utf-8")
    else:
        (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}), encoding="utf-8")
    return directory


@pytest.mark.parametrize("as_jinja", [True, False])
def test_a_model_whose_template_ignores_thinking_is_refused(tmp_path: Path, as_jinja: bool) -> None:
    model = _model_dir(tmp_path, CHATML_TEMPLATE, as_jinja=as_jinja)
    plan = _plan("sglang", str(model), **CHAT, thinking_mode="on", ignore_eos=False)
    settings = Settings(model_dirs=[tmp_path])
    errors, warnings = thinking_checks(plan, settings, "ja")
    assert errors == [f"{model} のチャットテンプレートは enable_thinking を受け取りません(true でも false でも同じ"
                      "プロンプトになります)。このモデルでは thinking モードを切り替えられません。"]
    assert warnings == []
    report = check_plan(plan, settings, "en")
    assert not report.ok and any("does not take enable_thinking" in e for e in report.errors)


def test_a_qwen3_template_is_accepted(tmp_path: Path) -> None:
    model = _model_dir(tmp_path, QWEN3_TEMPLATE, as_jinja=True)
    plan = _plan("sglang", str(model), **CHAT, thinking_mode="off", ignore_eos=False)
    assert served_template(plan, tmp_path).text == QWEN3_TEMPLATE
    assert thinking_checks(plan, Settings(model_dirs=[tmp_path]), "en") == ([], [])


def test_a_template_that_cannot_be_read_here_and_fixed_lengths_warn(tmp_path: Path) -> None:
    plan = _plan("sglang", "Qwen/Qwen3-30B-A3B", **CHAT, thinking_mode="on")  # a hub id, ignore_eos left on
    errors, warnings = thinking_checks(plan, Settings(), "en")
    assert errors == []
    assert len(warnings) == 2
    assert warnings[0].startswith("The chat template of Qwen/Qwen3-30B-A3B could not be read here")
    assert warnings[1].startswith("With ignore_eos on, every output runs to its requested length")


def test_the_emulators_template_takes_enable_thinking_as_its_server_does(tmp_path: Path) -> None:
    """The toy template (emulator/build_tokenizer.py) renders what the emulator's chat
    prompt is, for true, false and no keyword: the checks and the server agree."""
    build(tmp_path)
    plan = _plan(**CHAT, thinking_mode="on", ignore_eos=False)
    assert thinking_checks(plan, Settings(tokenizer_dir=tmp_path), "en") == ([], [])
    template = served_template(plan, tmp_path).text
    assert template is not None
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    messages = [{"role": "user", "content": "Hello"}]
    tokens = TokenText(tmp_path)
    for flag in (True, False, None):
        extra = {} if flag is None else {"enable_thinking": flag}
        rendered = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template).render(
            messages=messages, add_generation_prompt=True, **extra)
        assert rendered == tokens.chat_prompt(messages, flag)


# --- the emulator -------------------------------------------------------------------------------

EMULATOR_ARGS = ["--model-path", "Qwen/Qwen3-30B-A3B", "--emulate-schema-dir", str(SCHEMA_DIR),
                 "--emulate-startup-s", "0.4"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("tokenizer")
    build(directory)
    return directory


@pytest.fixture(scope="module")
def emulator(tokenizer_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    log = tmp_path_factory.mktemp("emulator") / "server.log"
    with running_emulator([*EMULATOR_ARGS, "--emulate-tokenizer-dir", str(tokenizer_dir)], log) as proc:
        yield proc


def _chat(emulator: EmulatorProcess, content: str, thinking: bool | None, ignore_eos: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": content}],
                            "max_completion_tokens": 3000, "ignore_eos": ignore_eos}
    if thinking is not None:
        body["chat_template_kwargs"] = {"enable_thinking": thinking}
    response = requests.post(emulator.base_url + "/v1/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return dict(response.json()["usage"])


PROMPTS = [f"question {i}: how many tokens does a server decode per second" for i in range(4)]


def test_the_emulator_reasons_before_answering_when_thinking_is_on(emulator: EmulatorProcess,
                                                                   tokenizer_dir: Path) -> None:
    jobs = [(p, mode) for p in PROMPTS for mode in (True, False, None)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        usages = dict(zip(jobs, pool.map(lambda job: _chat(emulator, *job), jobs), strict=True))
    tokens = TokenText(tokenizer_dir)
    for prompt in PROMPTS:
        on, off, plain = usages[(prompt, True)], usages[(prompt, False)], usages[(prompt, None)]
        seed = TokenText.seed(tokens.encode(tokens.chat_prompt([{"role": "user", "content": prompt}])))
        # on: the same prompt as without the keyword, then the reasoning before the answer
        assert on["prompt_tokens"] == plain["prompt_tokens"]
        assert on["completion_tokens"] == plain["completion_tokens"] + tokens.thinking_length(seed)
        # off: Qwen3's empty reasoning block closes the prompt; the answer is of natural length
        assert off["prompt_tokens"] == plain["prompt_tokens"] + len(tokens.encode(EMPTY_THINK_BLOCK))
        assert off["completion_tokens"] <= 2 * 256
    assert sum(usages[(p, True)]["completion_tokens"] for p in PROMPTS) > 1.5 * sum(
        usages[(p, False)]["completion_tokens"] for p in PROMPTS)


def test_with_ignore_eos_thinking_does_not_change_the_length(emulator: EmulatorProcess) -> None:
    assert _chat(emulator, PROMPTS[0], True, ignore_eos=True)["completion_tokens"] == 3000


# --- through the real bench client --------------------------------------------------------------

SGLANG_PYTHON = ROOT / ".venv-sglang" / "bin" / "python"


def _bench(emulator: EmulatorProcess, tokenizer_dir: Path, plan: RunPlan, out: Path) -> dict[str, Any]:
    argv = ["-m", "sglang.bench_serving", "--backend", plan.benchmark.backend, "--base-url", emulator.base_url,
            "--tokenizer", str(tokenizer_dir), "--dataset-name", "random-ids", "--random-input-len", "64",
            "--random-output-len", "2000", "--random-range-ratio", "1.0", "--num-prompts", "12",
            "--max-concurrency", "12", "--seed", "7", "--disable-ignore-eos", "--disable-tqdm",
            "--output-file", str(out), *bench_argv_extras(plan.benchmark)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([str(SGLANG_PYTHON), *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240, check=False, start_new_session=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return dict(json.loads(out.read_text().strip().splitlines()[-1].replace("Infinity", "1e999")))


@pytest.mark.sglang
@pytest.mark.slow
@pytest.mark.skipif(not SGLANG_PYTHON.exists(), reason="needs the SGLang environment (.venv-sglang)")
def test_the_bench_client_measures_longer_outputs_with_thinking_on(emulator: EmulatorProcess, tokenizer_dir: Path,
                                                                   tmp_path: Path) -> None:
    records = {mode: _bench(emulator, tokenizer_dir, _plan(**CHAT, thinking_mode=mode, ignore_eos=False),
                            tmp_path / f"{mode}.jsonl") for mode in ("on", "off")}
    mean = {mode: r["total_output_tokens"] / r["completed"] for mode, r in records.items()}
    print(f"mean output tokens through bench_serving (server usage, 12 prompts): on {mean['on']:.0f}, "
          f"off {mean['off']:.0f}")
    assert all(r["completed"] == 12 for r in records.values())
    assert mean["on"] > 1.5 * mean["off"]
    # The counts are the server's (usage), not the requested 2000: the client re-tokenized the same.
    for record in records.values():
        assert record["total_output_tokens"] == record["total_output_tokens_retokenized"] < 12 * 2000
