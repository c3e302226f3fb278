"""The staging orchestration: from a Config to an Outcome (staging/run.py),
above the acting layer (acting/) that carries a plan out."""

from llmkube_stager.staging.prepare import Effects, Prepared, prepare
from llmkube_stager.staging.run import run_stage, stage_model

__all__ = ["Effects", "Prepared", "prepare", "run_stage", "stage_model"]
