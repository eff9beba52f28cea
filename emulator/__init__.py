"""The emulator: a server of benchdeck's own that speaks SGLang's HTTP protocol.

This host has no GPU, so ``engine: emulator`` runs this instead of SGLang, and the rest of
the pipeline (runner daemon, processes, the real bench_serving client, DuckDB, pages) runs
for real.  Nothing it produces may pass for a real result: its first log line says so, and
``/server_info`` carries ``"emulated": true``.

Modules:

- :mod:`~emulator.launch`: the command line (``python -m emulator``),
  start-up/shutdown and the emulated cold start (``--emulate-cold-start-s``);
- :mod:`~emulator.flags`: SGLang's flags by exact match against the version's
  schema, plus the ``--emulate-*`` options;
- :mod:`~emulator.config`: resolving flags as SGLang does (auto-sized values);
- :mod:`~emulator.sizing`: model and GPU-memory arithmetic (KV cell, weights,
  ``max_total_num_tokens``; re-exported from domain/estimate/sizing.py), separate from
  ``domain/plan/memory_fit.py`` on purpose;
- :mod:`~emulator.timing`: step durations: the estimator's model (domain/estimate/step_time.py)
  with the constants of domain/estimate/calibration.yaml;
- :mod:`~emulator.scheduler`: the continuous-batching scheduler, a pure state
  machine;
- :mod:`~emulator.step_loop`: runs the scheduler in real time under asyncio;
- :mod:`~emulator.predict`: runs it on a virtual clock to predict bench figures;
- :mod:`~emulator.generation`: a generation request whichever API it came in by (the
  server's state, the request's input and checks, its run through the step loop, its output
  text, JSON bodies and server-sent events), shared by both HTTP surfaces;
- :mod:`~emulator.server`, :mod:`~emulator.metrics`,
  :mod:`~emulator.tokens`, :mod:`~emulator.startup`: SGLang's HTTP endpoints,
  Prometheus metrics, tokenizer, log lines and fatal exits.

The vLLM personality (``python -m emulator --emulate-engine vllm --model M ...``) reuses the
scheduler, step loop, timing model and request plumbing (:mod:`~emulator.generation`) above
and adds its own command line (:mod:`~emulator.vllm_flags`, against the shipped ``vllm serve`` schemas), sizing
(:mod:`~emulator.vllm_config`, ``--gpu-memory-utilization`` as vLLM reads it), HTTP surface
(:mod:`~emulator.vllm_server`), metrics (:mod:`~emulator.vllm_metrics`), log lines and fatal
exits (:mod:`~emulator.vllm_startup`) and start-up order (:mod:`~emulator.vllm_launch`: the
port is bound but not listened on until the engine is ready).  Its first log line says that
it is not vLLM.
"""

from emulator.config import EmulatorConfig, config_from_argv
from emulator.predict import Prediction, predict, rescale_record, steady_state

__all__ = ["EmulatorConfig", "Prediction", "config_from_argv", "predict", "rescale_record", "steady_state"]
