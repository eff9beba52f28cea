"""Start the Streamlit app with the legacy ``pages/`` auto-discovery switched off.

app.py routes with ``st.navigation``.  Streamlit still treats a folder named ``pages/``
beside the main script as a v1 multipage app until the first ``st.navigation`` call of
the process, so the very first visitor of a deep link (a shared comparison URL, say)
would get the raw page script without app.py's frame, or a "Page not found" dialog.
Clearing the flag before the server starts makes every request go through app.py.
``tests/test_browser_app.py`` opens a deep link first, so an upgrade that changes this fails there.

Usage: python scripts/serve_app.py [streamlit run options...]
"""

import sys
from pathlib import Path

from streamlit.runtime.pages_manager import PagesManager
from streamlit.web import cli

PagesManager.uses_pages_directory = False

if __name__ == "__main__":
    app = str(Path(__file__).resolve().parent.parent / "app.py")
    sys.argv = ["streamlit", "run", app, *sys.argv[1:]]
    sys.exit(cli.main())
