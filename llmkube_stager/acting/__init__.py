"""The acting layer: carries out a plan (acting/executor.py) with a run's
network state (acting/session.py), files in flight (acting/inflight.py),
and what the run records beside its files (acting/recorder.py)."""
