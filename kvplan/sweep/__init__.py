"""`kvplan sweep`: a grid of bench runs as one study. The sweep file's grid and its run
(grid.py), the checks of its tables (checks.py), one point as one result record (point.py),
the results file a resumed sweep keeps (store.py) and the study summaries over its records
(summary.py)."""
