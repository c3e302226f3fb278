"""hf:// and huggingface.co sources: `source.py` (the Source and its
fetcher), `api.py` (the hub API through huggingface_hub, imported only when
asked), `ref.py` (pure parsing of the source's forms)."""
