"""`python -m llmkube_stager` is the `llmkube-stager` console script."""

from llmkube_stager.entry import main

main()
