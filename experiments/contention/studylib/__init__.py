"""The contention study's report generator in parts: load (the store), analysis (numbers),
figures (PNGs) and report (REPORT.md). experiments/contention/plot.py is the command."""
