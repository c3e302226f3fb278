"""A SAS held for a run is a credential: its repr (what a traceback's
formatted locals, a debugger or a log of the object would show) never
carries it (the last look of 2026-12-03)."""

from llmkube_stager.sources.azure.credentials import StaticSas


def test_a_static_sas_is_not_in_its_repr() -> None:
    sas = "sv=2021-08-06&sp=rl&sig=CANARYsig0123456789"
    held = StaticSas(sas, "the SAS in MODEL_SOURCE's query")
    assert "CANARY" not in repr(held)
    assert held.query() == sas
