import gc
import sys

# The collector is off while the CLI imports its modules (DuckDB, pandas, the domain),
# then everything they made is frozen out of its passes: a CLI call spends less of its CPU
# on imports, and a long-lived runner's full collections skip the objects that live as
# long as it does.  Objects made later are collected as usual.
gc.disable()
# The doctor is dispatched before the CLI's imports (DuckDB, pandas): see runner/doctor_cmd.py.
_words = [w for w in sys.argv[1:] if not w.startswith("--lang")]
if sys.argv[1:2] == ["--lang"]:
    _words = sys.argv[3:]
if _words[:1] == ["doctor"]:
    from runner.doctor_cmd import main
else:
    from runner.cli import main
gc.enable()
gc.freeze()

sys.exit(main())
