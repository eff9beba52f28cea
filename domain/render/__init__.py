"""What leaves benchdeck: charts, table exports and the deck.  The only package that
imports altair, vl-convert and python-pptx."""
