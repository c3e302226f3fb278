"""gs:// sources: Google Cloud Storage through its JSON API, the bytes
through the agent's own engine (#33 item 1)."""
