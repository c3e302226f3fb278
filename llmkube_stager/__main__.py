"""`python -m llmkube_stager` is the `llmkube-stager` console script."""

from llmkube_stager.cli import main

main()
