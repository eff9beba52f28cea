"""Plans used across tests."""

MINIMAL_PLAN_YAML = """\
name: tp1-baseline
engine: emulator            # sglang | emulator
# sglang_version: "0.5.23"  # optional: the flag schema to validate against; default = the runner host's SGLang
model: Qwen/Qwen3-30B-A3B   # HF id, or a path inside an allowed model directory
gpu: {type: H200, count: 1}
server_args:                # SGLang flag names without the leading dashes
  tp-size: 1
  max-running-requests: 64
  mem-fraction-static: 0.85
benchmark:
  scenarios:
    - {name: short, input_len: 128, output_len: 128}
  concurrency: [1, 4]
  num_prompts: 10x          # per point; "10x" = 10 × concurrency, or an integer
  warmup: 2x
  repeats: 1
"""


def minimal_plan(**overrides: object):
    from domain.plan.plan_io import load_yaml_mapping, plan_from_mapping

    data = load_yaml_mapping(MINIMAL_PLAN_YAML, max_bytes=1 << 20)
    data.update(overrides)
    return plan_from_mapping(data)
