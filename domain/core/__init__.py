"""What every room uses: settings, run and attempt states, access rules, the ja/en catalogue."""
