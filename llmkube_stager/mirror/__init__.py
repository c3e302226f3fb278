"""The in-cluster mirror (docs/mirror.md): a store that holds each model
version once, read before the origin and filled by one seeder.

layout.py is pure (keys, the manifest's form); store.py reaches the mirror
through the sources' own fetchers; reader.py is the fetcher a run uses when
a mirror is set; seed.py uploads what a seeder staged and verified.
"""
