"""Azure Blob sources (#33 item 2): `https://<account>.blob.core.windows.net/
<container>/<path>` and `https://<account>.z<N>.blob.storage.azure.net/...`,
a prefix or one blob. ref.py parses (pure), credentials.py chooses what
authorises a request, listing.py lists, source.py moves the bytes through
the agent's engine, errors.py names the remedies."""
