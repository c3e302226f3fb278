"""The LLMKube operator, unchanged, with this image as its init image
(#30, #39): the operator runs every container as `sh -c <generated script>`,
which overrides the image's entrypoint, and the scripts call curl.

catalogue.py knows the operator's commands by the digest of their whole
text (catalogue.json: every LLMKube version read, with what each command
means); segments.py cuts a script into commands only to say where it
differs from the nearest one; shell.py is the image's `sh` (first on PATH):
a command in the catalogue runs as the agent, in process, another script
that would download is refused, anything else goes to the real /bin/sh;
check.py is `llmkube-stager check-command`. docs/switching-llmkube.md is
the user's page.
"""
