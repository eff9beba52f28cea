"""Domain code shared by the app and the runner: run plans, flags, comparability,
analysis and exports.  Imports neither Streamlit nor subprocess, so it is tested directly."""
