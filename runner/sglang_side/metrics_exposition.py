"""The ``/metrics`` text that a real SGLang server's own collectors write, for sizing the sampler.

Run with the SGLang interpreter (``<sglang python> runner/sglang_side/metrics_exposition.py
--model-path DIR [--dp-size N]``), never with the app's: it imports sglang, and nothing of
benchdeck.  It prints to stdout what a TP8 server of the model in DIR (a directory with a
``config.json``) exposes once every metric has been touched:

- the server arguments are parsed and published by SGLang itself (``ServerArgs``,
  ``runtime_context.publish``), so the label set and the buckets are the ones that version
  chooses for them;
- the scheduler's and the tokenizer's collectors are built through their own constructors
  (``SchedulerMetricsCollector.init_new``, ``TokenizerMetricsCollector``);
- every labelled family gets its series (a histogram: every bucket), as after a benchmark;
  with ``--dp-size N`` (DP attention, ``--enable-metrics-for-all-schedulers``) once per
  ``dp_rank``, as the multiprocess registry of such a server merges them.

No GPU, no model weights and no server are needed; the client environment has no
``prometheus_client``, so the caller lends the app's copy on ``PYTHONPATH``.  The sampler's CPU benchmark
(``python -m bench runner_gaps``) serves this text at the real size instead of the
emulator's much smaller one.
"""

from __future__ import annotations

import argparse
import sys
import warnings


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-path", required=True)
    parser.add_argument("--dp-size", type=int, default=1)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")  # CPU-only import warnings (GGUF, CUDA) are not the exposition

    from prometheus_client import REGISTRY, generate_latest
    from prometheus_client.metrics import MetricWrapperBase
    from sglang.srt.observability.metrics_collector import (
        SchedulerMetricsCollector,
        TokenizerMetricsCollector,
        tokenizer_metric_labels,
    )
    from sglang.srt.runtime_context import SpawnRanks, publish
    from sglang.srt.server_args import ServerArgs

    dp = args.dp_size
    server_args = ServerArgs(model_path=args.model_path, tp_size=8, dp_size=dp, enable_dp_attention=dp > 1,
                             enable_metrics=True, enable_metrics_for_all_schedulers=dp > 1,
                             device="cuda", served_model_name="Qwen/Qwen3-235B-A22B-FP8")
    publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0, dp_rank=0 if dp > 1 else None, gpu_id=0))
    context = SchedulerMetricsCollector.init_new(server_args=server_args, enable_priority_scheduling=False,
                                                 enable_lora=False, enable_hierarchical_cache=False)
    scheduler = context.collector
    if scheduler is None:
        print("SGLang built no scheduler collector", file=sys.stderr)
        return 1
    tokenizer_labels = tokenizer_metric_labels()
    tokenizer = TokenizerMetricsCollector(server_args, tokenizer_labels)

    def touch(collector: object, labels: dict[str, str]) -> None:
        for metric in vars(collector).values():
            if isinstance(metric, MetricWrapperBase) and metric._labelnames and not metric._labelvalues:
                metric.labels(**{name: str(labels.get(name, "")) for name in metric._labelnames})

    for rank in range(dp):
        touch(scheduler, {**scheduler.labels, **({"dp_rank": str(rank)} if dp > 1 else {})})
    touch(tokenizer, tokenizer_labels)
    sys.stdout.buffer.write(generate_latest(REGISTRY))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
