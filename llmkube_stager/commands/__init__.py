"""The commands. run.py holds the body of each (`stage`, `plan`, `verify`,
`inspect`, `diagnose`), run inside the boundary; beside it the read-only
views: verify.py, inspect.py, plan_view.py (`plan`'s output) and
diagnose.py. None of the views writes the cache or opens a connection
(except `plan --probe`, through the same probe `stage` uses)."""
