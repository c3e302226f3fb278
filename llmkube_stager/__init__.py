"""llmkube-stager: stage LLM model files into a shared Kubernetes cache."""

# The only place the version is written: pyproject.toml reads it from here
# (setuptools `attr:`), so the installed metadata cannot disagree.
__version__ = "0.1.0"
