"""The cache directory: layout, filesystem probe, records, publish."""
