"""llmkube-stager: stage LLM model files into a shared Kubernetes cache."""

__version__ = "0.1.0"
