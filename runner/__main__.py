import sys

# The doctor is dispatched before the CLI's imports (DuckDB, pandas): see runner/doctor_cmd.py.
_words = [w for w in sys.argv[1:] if not w.startswith("--lang")]
if sys.argv[1:2] == ["--lang"]:
    _words = sys.argv[3:]
if _words[:1] == ["doctor"]:
    from runner.doctor_cmd import main
else:
    from runner.cli import main

sys.exit(main())
