"""Test-support helpers: a loopback HTTP origin with fault injection and sample model files."""
