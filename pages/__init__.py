"""Streamlit pages.  Presentation only: they call db/ and domain/, never start processes."""
