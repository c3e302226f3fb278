"""KServe's storage initializer, drop-in (#24): `llmkube-stager SRC_URI
DEST_DIR [SRC_URI DEST_DIR ...]`, the arguments KServe's webhook gives the
init container `storage-initializer` of a ClusterStorageContainer.

uris.py maps a storage URI onto the agent's configuration (pure), command.py
runs the same engine as `stage` for each pair, expose.py makes the staged
files appear in DEST_DIR, archive.py unpacks .tar/.tgz/.zip safely.
docs/migration-kserve.md is the user's page.
"""
