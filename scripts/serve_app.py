"""Start the Streamlit app safely: refuse an unauthenticated network listener, trust no
forwarding header the app did not ask for, and switch off legacy ``pages/`` discovery.

- **Start-up rule** (domain/core/access.py ``startup_refusal``): listening on a non-loopback
  address needs OIDC or a trusted proxy, unless BENCHDECK_ALLOW_UNAUTHENTICATED_NETWORK
  says otherwise.  Exits with status 2 and the reason.
- **Forwarding headers:** Streamlit serves through uvicorn, which by default believes
  ``X-Forwarded-For`` from 127.0.0.1 and rewrites the peer address.  Anyone on the host
  could then claim to be the trusted proxy.  ``FORWARDED_ALLOW_IPS`` is set to empty so
  the address the app sees is the TCP peer; proxy mode checks that address itself.
- **Legacy pages:** app.py routes with ``st.navigation``.  Streamlit still treats a folder
  named ``pages/`` beside the main script as a v1 multipage app until the first
  ``st.navigation`` call of the process, so the very first visitor of a deep link would get
  the raw page script.  Clearing the flag before the server starts makes every request go
  through app.py (``tests/test_browser_app.py`` opens a deep link first).
- **Imports ahead of the first visitor:** the modules the pages import (``db``, the
  analysis with scipy, the charts with Altair, the deck with python-pptx, Streamlit's
  emoji table: about 2 s here) are imported in a background thread while the server
  starts, so the first visit of a page after a start does not wait for them (``python -m
  bench pages_browser``, cold column).  What they loaded is then frozen out of the garbage
  collector's passes, which Streamlit runs over every object after every script run.
- **Deep links without a probe:** each page's HTML tells Streamlit's script where the
  server's root is (scripts/index_page.py), so a fresh tab on ``/compare`` does not first
  ask ``/compare/_stcore/health`` for it.
- **A linked comparison started early:** the HTML request of ``/compare?baseline=…&runs=…``
  (or the checklist's) starts that comparison in a background thread while the browser
  loads Streamlit's scripts (scripts/page_warmup.py).

Usage: python scripts/serve_app.py [streamlit run options...]
"""

import ast
import importlib
import inspect
import logging
import os
import sys
import threading
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamlit.runtime.pages_manager import PagesManager  # noqa: E402
from streamlit.web import cli  # noqa: E402

from domain.core.access import startup_refusal  # noqa: E402
from domain.core.collector import paused_then_frozen  # noqa: E402
from domain.core.settings import get_settings  # noqa: E402
from scripts import index_page, page_warmup  # noqa: E402


def _option(args: list[str], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in streamlit's own arguments."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _config_value(section: str, key: str) -> object:
    path = ROOT / ".streamlit" / "config.toml"
    return tomllib.loads(path.read_text(encoding="utf-8")).get(section, {}).get(key) if path.exists() else None


def bind_address(args: list[str]) -> str:
    """Where Streamlit will listen: argument, then environment, then config.toml; empty
    means every address (Streamlit's own default)."""
    value = _option(args, "--server.address") or os.environ.get("STREAMLIT_SERVER_ADDRESS")
    return str(value if value is not None else _config_value("server", "address") or "")


def has_oidc_secrets(args: list[str]) -> bool:
    files = _option(args, "--secrets.files")
    candidates = [Path(f) for f in files.split(",")] if files else [
        Path.home() / ".streamlit" / "secrets.toml", Path.cwd() / ".streamlit" / "secrets.toml",
    ]
    for path in candidates:
        try:
            if "auth" in tomllib.loads(path.read_text(encoding="utf-8")):
                return True
        except (OSError, tomllib.TOMLDecodeError):
            continue
    return False


WARMED_UP = "benchdeck: the pages' modules are imported"  # in the server's output (bench/pages_browser.py waits for it)


def page_modules() -> list[str]:
    """Every module the pages import (their ``import`` and ``from … import`` lines, read
    with ``ast``), so the list follows the pages as they change; the pages' own parts
    import little else."""
    names: set[str] = set()
    for path in sorted((ROOT / "pages").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
    # Not the pages' own parts nor Streamlit: their caches must be made inside the running
    # server (made before it, st.cache_data falls back to a store of its own).  Except
    # Streamlit's emoji table, a plain module that the first alert with an icon imports
    # (compiling one large pattern: 0.3 s on the first visit that shows one).
    # Also pandas' Styler (with jinja2), which ``DataFrame.style`` imports on the first
    # styled table (0.07 s).
    pages_import = {n for n in names - {"__future__"} if n.split(".")[0] not in ("pages", "streamlit")}
    # And scipy.stats, which a comparison of points with per-request samples imports for
    # its bootstrap (domain/results/requests.py imports it late, for the runner's sake): 0.9 s.
    return sorted(pages_import | {"streamlit.emojis", "pandas.io.formats.style", "scipy.stats"})


def import_quietly(modules: list[str]) -> None:
    """Import each module; one that fails is left for the page that needs it to fail
    visibly (a warm-up must not change what a page shows).  Then one throwaway Altair
    chart, whose first ``to_dict`` loads the schema validator (0.1 s on the first chart
    page after a start), drawn as a picture (vl-convert starts its JavaScript runtime on the
    first picture of the process: 0.8 s here, before the run page's first), the UI
    catalogue, the shipped flag schemas and inspect's module map; the pages' parts and the
    store once the runtime exists (:func:`warm_parts_and_store`); then everything loaded so
    far is frozen out of the garbage collector's passes (``gc.freeze``)."""
    start = time.monotonic()
    # What loads now lives as long as the server: loaded with the collector off, then out of
    # its sight (domain/core/collector.py).  Streamlit collects all generations after every
    # script run (runner.postScriptGC), holding the GIL while the run's last messages wait
    # to be sent; over these ~200,000 objects that took 0.13-0.26 s a rerun.
    with paused_then_frozen():
        _warm_up(modules)
    print(f"{WARMED_UP} ({len(modules)} modules in {time.monotonic() - start:.1f} s)", flush=True)


def _warm_up(modules: list[str]) -> None:
    import_quietly_each(modules)
    try:
        import pandas as pd

        from domain.render.charts import run_points_chart  # the one package that draws with Altair
        from domain.render.pictures import page_spec, page_svg

        page_svg(page_spec(run_points_chart(pd.DataFrame({"scenario": ["s"], "concurrency": [1], "metric": ["m"],
                                                          "value": [1.0]}))))
    except Exception:  # noqa: S110 - only a warm-up: a page that draws a chart reports its own error
        pass
    try:
        from domain.core.i18n import catalogue
        from domain.flags.schema import known_versions, load_schema

        catalogue()  # every page's text
        for version in known_versions():  # the Build page's flag checks
            load_schema(version)
        # Streamlit's first element of the process asks whether it runs in a REPL
        # (``env_util.is_repl``: ``inspect.stack()``), which maps every loaded module to
        # its file the first time: 0.1-0.26 s of the first visit after a start.  One call
        # here builds inspect's map; later calls only add the modules loaded since.
        inspect.stack()
    except Exception:  # noqa: S110 - only a warm-up: the page that reads them reports its own error
        pass
    warm_parts_and_store()


RUNTIME_WAIT_S = 60.0  # how long the warm-up waits for Streamlit's runtime before giving up on the parts


def part_modules() -> list[str]:
    """The pages' own parts (pages/parts/*.py): libraries of the pages, with no element drawn
    when imported."""
    return sorted(f"pages.parts.{path.stem}" for path in (ROOT / "pages" / "parts").glob("*.py")
                  if path.stem != "__init__")


def warm_parts_and_store() -> None:
    """Once Streamlit's runtime exists (the parts' caches must be made inside it: see
    :func:`page_modules`), import the pages' parts and open the store, which checks the
    schema (``Store.migrate``).  A cold visit of the compare page paid both on its path:
    0.15 s importing its parts and 0.15 s checking migrations, profiled in the server.
    A store that cannot be opened now (the runner holds the file) is opened by the first
    page, as before, and says why there."""
    from streamlit import runtime

    deadline = time.monotonic() + RUNTIME_WAIT_S
    while not runtime.exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)
    # Outside a session Streamlit warns, for each thread, that it has no script context;
    # here that is the point, and the warning would read as a fault in the server's output.
    context_log = logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context")
    level = context_log.level
    context_log.setLevel(logging.ERROR)
    try:
        import_quietly_each(part_modules())
        from pages.parts.common import store

        store()
    except Exception:  # noqa: S110 - only a warm-up: the first page opens the store itself and shows why not
        pass
    finally:
        context_log.setLevel(level)


def import_quietly_each(modules: list[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: S112 - the page that imports it fails visibly
            continue


def main() -> int:
    args = sys.argv[1:]
    settings = get_settings()
    refusal = startup_refusal(
        mode=settings.auth_mode, address=bind_address(args), has_oidc_secrets=has_oidc_secrets(args),
        trusted_proxies=settings.trusted_proxies, allow_open_network=settings.allow_unauthenticated_network,
    )
    if refusal:
        print(f"benchdeck: {refusal}", file=sys.stderr)
        return 2
    os.environ["FORWARDED_ALLOW_IPS"] = ""
    PagesManager.uses_pages_directory = False
    index_page.install()
    page_warmup.install(settings.auth_mode, settings.trusted_proxies)
    sys.argv = ["streamlit", "run", str(ROOT / "app.py"), *args]
    threading.Thread(target=import_quietly, args=(page_modules(),), name="benchdeck-imports", daemon=True).start()
    return int(cli.main() or 0)


if __name__ == "__main__":
    sys.exit(main())
