"""The read-only commands: `verify`, `inspect`, `plan` rendering and
`diagnose`. None of them writes the cache or opens a connection (except
`plan --probe`, through the same probe `stage` uses)."""
