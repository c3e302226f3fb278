"""Today's LLMKube operator, unchanged, with this image as its init image
(#30): the operator runs every container as `sh -c <generated script>`,
which overrides the image's entrypoint, and the scripts call curl.

shellwords.py reads a script into simple commands (pure), recognise.py
decides from their structure which operator command it is (pure: script
text -> `OperatorCommand` or None), and shell.py is the image's `sh`
(first on PATH): it runs a recognised download command as the agent, in
process, and hands everything else to the real /bin/sh.
docs/switching-llmkube.md is the user's page.
"""
